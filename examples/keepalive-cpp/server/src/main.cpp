// A small HTTP/1.1 keep-alive server: one thread, one level-triggered epoll
// set, and the same tiny response to every request. Linux only.
//
// Usage: server -p PORT    (listens on [::1]:PORT, IPv6 only)

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http/response.hpp"

namespace {

constexpr int kBacklog = 4096;
constexpr int kMaxEvents = 64;
constexpr size_t kReadSize = 4096;
// A request is a few dozen bytes; a client that sends this much without
// ending its headers is not one this server serves.
constexpr size_t kMaxRequest = 8192;

struct Conn {
    int fd = -1;
    uint32_t events = 0;  // the interest registered with epoll now
    bool eof = false;     // the peer has shut its side: no more requests
    std::string in;       // received bytes not yet answered
    std::string out;      // response bytes the socket has not taken yet
    size_t sent = 0;      // how much of `out` the socket has taken
};

int g_epoll = -1;
uint64_t g_requests = 0;  // the last X-Request-Id given; the first is 1

[[noreturn]] void die(const char *what) {
    std::perror(what);
    std::exit(1);
}

bool set_nonblocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Tells epoll what the connection waits for: requests until EOF, and room to
// write while output is queued. Only a change costs a system call.
bool rearm(Conn &c) {
    uint32_t want = 0;
    if (!c.eof)
        want |= EPOLLIN;
    if (c.sent < c.out.size())
        want |= EPOLLOUT;
    if (want == c.events)
        return true;
    epoll_event ev{};
    ev.events = want;
    ev.data.ptr = &c;
    if (epoll_ctl(g_epoll, EPOLL_CTL_MOD, c.fd, &ev) < 0)
        return false;
    c.events = want;
    return true;
}

// Sends as much queued output as the socket takes; the rest waits for
// EPOLLOUT. False when the connection is broken.
bool flush(Conn &c) {
    while (c.sent < c.out.size()) {
        ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return rearm(c);
            return false;
        }
        c.sent += static_cast<size_t>(n);
    }
    c.out.clear();
    c.sent = 0;
    return rearm(c);
}

// Queues bytes behind any still waiting, so responses keep their order, and
// sends at once.
bool emit(Conn &c, const char *data, size_t length) {
    c.out.append(data, length);
    return flush(c);
}

// Answers one request; the head and the body are written separately.
bool respond(Conn &c) {
    std::string head;
    http::append_head(head, ++g_requests);
    if (!emit(c, head.data(), head.size()))
        return false;
    return emit(c, http::kBody, http::kBodyLength);
}

// Answers every complete request received so far, in order. False when the
// connection must close.
bool serve_buffered(Conn &c) {
    size_t start = 0;
    for (;;) {
        size_t end = c.in.find("\r\n\r\n", start);
        if (end == std::string::npos)
            break;
        if (c.in.compare(start, 4, "GET ") != 0)
            return false;
        if (!respond(c))
            return false;
        start = end + 4;
    }
    c.in.erase(0, start);
    return c.in.size() <= kMaxRequest;
}

// Reads what has arrived and answers it. False when the connection must close.
bool on_readable(Conn &c) {
    char buf[kReadSize];
    ssize_t n = recv(c.fd, buf, sizeof buf, 0);
    if (n > 0) {
        c.in.append(buf, static_cast<size_t>(n));
        return serve_buffered(c);
    }
    if (n == 0) {
        // Every complete request was answered as it arrived, so only output
        // the socket has not taken yet keeps the connection open now.
        c.eof = true;
        return c.out.empty() || rearm(c);
    }
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

void close_conn(Conn *c) {
    close(c->fd);  // also drops it from the epoll set
    delete c;
}

void on_connection(Conn *c, uint32_t events) {
    bool alive = true;
    if (!c->eof && (events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        alive = on_readable(*c);
    // A hang-up or error while output waits makes send fail, which closes.
    if (alive && (events & (EPOLLOUT | EPOLLHUP | EPOLLERR)))
        alive = flush(*c);
    if (!alive || (c->eof && c->out.empty()))
        close_conn(c);
}

// Takes one connection off the listen queue. False when none was taken:
// the queue is empty, or the connection went away before it was accepted.
bool accept_one(int listener) {
    int fd = accept(listener, nullptr, nullptr);
    if (fd < 0)
        return false;
    if (!set_nonblocking(fd)) {
        close(fd);
        return true;
    }
    // Small writes must leave at once: under Nagle's algorithm one could wait
    // for the client's delayed ACK of the write before it.
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Conn *c = new Conn;
    c->fd = fd;
    c->events = EPOLLIN;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = c;
    if (epoll_ctl(g_epoll, EPOLL_CTL_ADD, fd, &ev) < 0)
        close_conn(c);
    return true;
}

// One accept per wakeup: the listener is level-triggered, so epoll reports
// it again while connections still wait.
void on_listener(int listener) {
    accept_one(listener);
}

int open_listener(uint16_t port) {
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) < 0)
        die("setsockopt");
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_port = htons(port);
    addr.sin6_addr = in6addr_loopback;
    if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) < 0)
        die("bind");
    if (listen(fd, kBacklog) < 0)
        die("listen");
    if (!set_nonblocking(fd))
        die("fcntl");
    return fd;
}

uint16_t parse_port(int argc, char **argv) {
    if (argc == 3 && std::strcmp(argv[1], "-p") == 0) {
        char *end = nullptr;
        long port = std::strtol(argv[2], &end, 10);
        if (*argv[2] != '\0' && *end == '\0' && port > 0 && port < 65536)
            return static_cast<uint16_t>(port);
    }
    std::fprintf(stderr, "usage: %s -p PORT\n", argv[0]);
    std::exit(2);
}

// Hundreds of connections at once can pass the default soft limit of 1024.
void raise_fd_limit() {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
        limit.rlim_cur = limit.rlim_max;
        setrlimit(RLIMIT_NOFILE, &limit);
    }
}

}  // namespace

int main(int argc, char **argv) {
    uint16_t port = parse_port(argc, argv);
    // A client that resets while a response is in flight must cost an
    // error from send, not the process.
    std::signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    int listener = open_listener(port);
    g_epoll = epoll_create1(0);
    if (g_epoll < 0)
        die("epoll_create1");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;  // marks the listener; connections carry their Conn
    if (epoll_ctl(g_epoll, EPOLL_CTL_ADD, listener, &ev) < 0)
        die("epoll_ctl");

    epoll_event events[kMaxEvents];
    for (;;) {
        int n = epoll_wait(g_epoll, events, kMaxEvents, -1);
        if (n < 0) {
            if (errno == EINTR)  // SIGSTOP and SIGCONT can interrupt the wait
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            if (events[i].data.ptr == nullptr)
                on_listener(listener);
            else
                on_connection(static_cast<Conn *>(events[i].data.ptr), events[i].events);
        }
    }
}
