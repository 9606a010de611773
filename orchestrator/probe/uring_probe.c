/*
 * ratchet doctor's io_uring probe: tries each feature the optimization loop
 * may reach for, for real, on this kernel, and prints one line per feature:
 * "<name> ok" or "<name> no <reason>".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void report(const char *name, int ret)
{
	if (ret >= 0)
		printf("%s ok\n", name);
	else
		printf("%s no %s\n", name, strerror(-ret));
}

static int probe_flags(unsigned flags)
{
	struct io_uring ring;
	int ret = io_uring_queue_init(8, &ring, flags);

	if (ret == 0)
		io_uring_queue_exit(&ring);
	return ret;
}

/* Arms a multishot accept into a sparse direct-descriptor table, connects
 * once, and checks that the completion keeps IORING_CQE_F_MORE. */
static void probe_accept(void)
{
	struct sockaddr_in addr = { .sin_family = AF_INET,
				    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(addr);
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	int lfd = socket(AF_INET, SOCK_STREAM, 0), cfd = -1, ret;

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) ||
	    listen(lfd, 8) || getsockname(lfd, (struct sockaddr *)&addr, &len)) {
		report("multishot_accept", -errno);
		report("direct_descriptors", -errno);
		return;
	}
	ret = io_uring_queue_init(8, &ring, 0);
	if (ret < 0) {
		report("multishot_accept", ret);
		report("direct_descriptors", ret);
		close(lfd);
		return;
	}
	ret = io_uring_register_files_sparse(&ring, 16);
	report("direct_descriptors", ret);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

	if (ret == 0)
		io_uring_prep_multishot_accept_direct(sqe, lfd, NULL, NULL, 0);
	else
		io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, 0);
	io_uring_submit(&ring);
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(cfd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		report("multishot_accept", -errno);
	} else {
		ret = io_uring_wait_cqe(&ring, &cqe);
		if (ret == 0) {
			ret = cqe->res < 0 ? cqe->res :
			      (cqe->flags & IORING_CQE_F_MORE) ? 0 : -EOPNOTSUPP;
			io_uring_cqe_seen(&ring, cqe);
		}
		report("multishot_accept", ret);
	}
	close(cfd);
	io_uring_queue_exit(&ring);
	close(lfd);
}

/* A NOP with IOSQE_CQE_SKIP_SUCCESS must post no completion. */
static void probe_skip_success(void)
{
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	int ret = io_uring_queue_init(8, &ring, 0);

	if (ret < 0) {
		report("cqe_skip_success", ret);
		return;
	}
	if (!(ring.features & IORING_FEAT_CQE_SKIP)) {
		report("cqe_skip_success", -EOPNOTSUPP);
	} else {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

		io_uring_prep_nop(sqe);
		sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
		io_uring_submit(&ring);
		ret = io_uring_peek_cqe(&ring, &cqe);
		report("cqe_skip_success", ret == -EAGAIN ? 0 : -EINVAL);
	}
	io_uring_queue_exit(&ring);
}

int main(void)
{
	report("io_uring", probe_flags(0));
	report("single_issuer_defer_taskrun",
	       probe_flags(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN));
	report("sqpoll", probe_flags(IORING_SETUP_SQPOLL));
	probe_accept();
	probe_skip_success();
	return 0;
}
