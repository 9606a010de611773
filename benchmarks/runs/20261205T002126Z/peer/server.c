/*
 * The treatment: ratchet's mutable io_uring TCP server, in its vanilla form.
 *
 * Contract (see harness.toml [contract]): accept a connection on 127.0.0.1,
 * read the request, write exactly RESPONSE, close (server-initiated FIN).
 *
 * This is the baseline the optimization loop starts from: a single-shot accept
 * re-armed after every completion, and recv, send and close as separate SQEs,
 * each with its own completion, driven by a batched io_uring_submit_and_wait.
 * Every connection object is malloc'd and freed. Nothing here is tuned; finding
 * the improvements is the loop's job.
 */
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define QUEUE_DEPTH 2048
#define BACKLOG 4096
#define RECV_BUF 1024

#define FILE_TABLE 4096

static const char RESPONSE[] =
	"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
#define RESPONSE_LEN (sizeof(RESPONSE) - 1)

/* The operation a completion belongs to travels in the low bits of its
 * user_data; the rest is the connection pointer (malloc aligns to 16). */
enum op { OP_ACCEPT, OP_RECV, OP_SEND, OP_CLOSE };
#define OP_MASK 7ULL

struct conn {
	int fd;
	char buf[RECV_BUF];
	struct conn *next;
};

static void tag(struct io_uring_sqe *sqe, struct conn *c, enum op op)
{
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | op);
}

static struct io_uring_sqe *get_sqe(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	while (!sqe) {
		io_uring_submit(ring);
		sqe = io_uring_get_sqe(ring);
	}
	return sqe;
}

static struct io_uring_sqe *arm_accept(struct io_uring *ring, int listen_fd)
{
	struct io_uring_sqe *sqe = get_sqe(ring);

	io_uring_prep_accept(sqe, listen_fd, NULL, NULL, 0);
	sqe->ioprio |= IORING_ACCEPT_MULTISHOT;
	sqe->file_index = IORING_FILE_INDEX_ALLOC;
	tag(sqe, NULL, OP_ACCEPT);
	return sqe;
}

static struct io_uring_sqe *arm_recv(struct io_uring *ring, struct conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(ring);

	io_uring_prep_recv(sqe, c->fd, c->buf, sizeof(c->buf), 0);
	sqe->flags |= IOSQE_FIXED_FILE;
	tag(sqe, c, OP_RECV);
	return sqe;
}

static struct io_uring_sqe *arm_send(struct io_uring *ring, struct conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(ring);

	io_uring_prep_send(sqe, c->fd, RESPONSE, RESPONSE_LEN, MSG_MORE);
	sqe->flags |= IOSQE_FIXED_FILE;
	tag(sqe, c, OP_SEND);
	return sqe;
}

static struct io_uring_sqe *arm_close(struct io_uring *ring, struct conn *c)
{
	struct io_uring_sqe *sqe = get_sqe(ring);

	io_uring_prep_close_direct(sqe, c->fd);
	tag(sqe, c, OP_CLOSE);
	return sqe;
}

#define POOL_SIZE 128

/* Released connections wait here for reuse. */
static struct conn *pool;

static struct conn *acquire(void)
{
	struct conn *c = pool;

	if (c) {
		pool = c->next;
		return c;
	}
	c = malloc(sizeof(*c));

	if (!c) {
		perror("malloc");
		exit(1);
	}
	return c;
}

static void release(struct conn *c)
{
	c->next = pool;
	pool = c;
}

static void fill_pool(void)
{
	for (int i = 0; i < POOL_SIZE; i++) {
		struct conn *c = malloc(sizeof(*c));

		if (!c)
			break;
		release(c);
	}
}

/* Send and close go out together and post a completion only on failure;
 * those completions carry no connection, so it is recycled at once. */
static void send_and_close(struct io_uring *ring, struct conn *c)
{
	struct io_uring_sqe *sqe = arm_send(ring, c);

	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	tag(sqe, NULL, OP_SEND);
	sqe = arm_close(ring, c);
	sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
	tag(sqe, NULL, OP_CLOSE);
	release(c);
}

static void on_accept(struct io_uring *ring, int listen_fd,
		      struct io_uring_cqe *cqe)
{
	if (!(cqe->flags & IORING_CQE_F_MORE))
		arm_accept(ring, listen_fd);
	if (cqe->res < 0)
		return;
	struct conn *c = acquire();

	c->fd = cqe->res;
	arm_recv(ring, c);
}

static void on_completion(struct io_uring *ring, int listen_fd,
			  struct io_uring_cqe *cqe)
{
	uint64_t data = io_uring_cqe_get_data64(cqe);
	struct conn *c = (struct conn *)(uintptr_t)(data & ~OP_MASK);

	switch ((enum op)(data & OP_MASK)) {
	case OP_ACCEPT:
		on_accept(ring, listen_fd, cqe);
		break;
	case OP_RECV:
		if (cqe->res <= 0)
			arm_close(ring, c);
		else
			send_and_close(ring, c);
		break;
	case OP_SEND:
		if (c)
			arm_close(ring, c);
		break;
	case OP_CLOSE:
		if (c)
			release(c);
		break;
	}
}

static int listen_on(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	struct sockaddr_in addr = {
		.sin_family = AF_INET,
		.sin_port = htons(port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	};

	if (fd < 0) {
		perror("socket");
		exit(1);
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		perror("bind");
		exit(1);
	}
	if (listen(fd, BACKLOG) < 0) {
		perror("listen");
		exit(1);
	}
	return fd;
}

static int parse_port(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i++) {
		if (strcmp(argv[i], "--port") == 0) {
			char *end;
			long port = strtol(argv[i + 1], &end, 10);

			if (*end == '\0' && port > 0 && port < 65536)
				return (int)port;
		}
	}
	fprintf(stderr, "usage: %s --port N\n", argv[0]);
	exit(2);
}

int main(int argc, char **argv)
{
	int port = parse_port(argc, argv);
	int listen_fd = listen_on(port);
	struct io_uring ring;
	int ret;

	signal(SIGPIPE, SIG_IGN);
	fill_pool();
	struct io_uring_params params = {
		.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
	};
	ret = io_uring_queue_init_params(QUEUE_DEPTH, &ring, &params);
	if (ret < 0) {
		fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-ret));
		return 1;
	}
	ret = io_uring_register_files_sparse(&ring, FILE_TABLE);
	if (ret < 0) {
		fprintf(stderr, "io_uring_register_files_sparse: %s\n", strerror(-ret));
		return 1;
	}
	arm_accept(&ring, listen_fd);

	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;

		ret = io_uring_submit_and_wait(&ring, 1);
		if (ret < 0 && ret != -EINTR) {
			fprintf(stderr, "io_uring_submit_and_wait: %s\n",
				strerror(-ret));
			return 1;
		}
		io_uring_for_each_cqe(&ring, head, cqe) {
			on_completion(&ring, listen_fd, cqe);
			seen++;
		}
		io_uring_cq_advance(&ring, seen);
	}
}
