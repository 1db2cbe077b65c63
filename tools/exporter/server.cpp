#include "tools/exporter/server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

namespace gg::exporter {
namespace {

constexpr size_t kMaxHead = 16384;

volatile sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

int64_t now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct Connection {
    int fd;
    int64_t accepted_ms;
    int64_t deadline_ms;  // of the request head while reading, of the response while writing
    std::string in;       // the request head so far
    std::string out;      // the response, once the head is in
    size_t sent = 0;
    bool writing() const { return !out.empty(); }
};

bool head_complete(const std::string &in) { return in.find("\r\n\r\n") != std::string::npos || in.size() >= kMaxHead; }

// Sends what the socket takes now. False once the connection is done with: all sent, or broken.
bool send_some(Connection &c) {
    while (c.sent < c.out.size()) {
        ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
        if (n > 0) {
            c.sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return false;
}

// Reads what has come; once the head is in, answers it and starts sending. False once the
// connection is done with.
bool receive_some(Connection &c, const ServerLimits &limits, const Responder &respond) {
    char buf[4096];
    bool closed = false;
    while (!head_complete(c.in)) {
        ssize_t n = recv(c.fd, buf, std::min(sizeof buf, kMaxHead - c.in.size()), 0);
        if (n > 0) {
            c.in.append(buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        closed = true;  // the client shut its side: answer what came, if anything did
        break;
    }
    if (closed && c.in.empty()) return false;
    c.out = respond(c.in);
    c.deadline_ms = now_ms() + limits.write_deadline_ms;
    return send_some(c);
}

// Room for one more connection: the one that has been reading its request longest goes (a client
// that trickles or says nothing); only when every connection is writing does the oldest writer.
void make_room(std::vector<Connection> &conns) {
    size_t victim = conns.size();
    for (size_t i = 0; i < conns.size(); i++) {
        bool better =
            victim == conns.size() || (conns[victim].writing() && !conns[i].writing()) ||
            (conns[victim].writing() == conns[i].writing() && conns[i].accepted_ms < conns[victim].accepted_ms);
        if (better) victim = i;
    }
    close(conns[victim].fd);
    conns.erase(conns.begin() + (long)victim);
}

// At most max_connections a round: a flood of connections is served in turns with the connections
// already open, not drained whole before them.
void accept_all(int listen_fd, std::vector<Connection> &conns, const ServerLimits &limits) {
    for (int accepted = 0; accepted < limits.max_connections; accepted++) {
        int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE) && !conns.empty()) {
            make_room(conns);  // out of descriptors: the oldest reader goes, as when full
            fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        }
        if (fd < 0) return;  // EAGAIN: none left; anything else (a reset) is retried at the next wakeup
        if ((int)conns.size() >= limits.max_connections) make_room(conns);
        int64_t t = now_ms();
        conns.push_back({fd, t, t + limits.request_deadline_ms, "", "", 0});
    }
}

// Waits for the sockets or the nearest deadline, with SIGTERM and SIGINT let through only here.
int wait_for(std::vector<pollfd> &fds, const std::vector<Connection> &conns, const sigset_t &unblocked) {
    int64_t wait = 60000, t = now_ms();
    for (const Connection &c : conns) wait = std::min(wait, std::max<int64_t>(0, c.deadline_ms - t));
    timespec ts{(time_t)(wait / 1000), (long)(wait % 1000) * 1000000};
    return ppoll(fds.data(), fds.size(), &ts, &unblocked);
}

// One round of the loop: what each ready connection can do now, then the deadlines.
void step(int listen_fd, std::vector<Connection> &conns, const ServerLimits &limits, const Responder &respond,
          const sigset_t &unblocked) {
    std::vector<pollfd> fds{{listen_fd, POLLIN, 0}};
    for (const Connection &c : conns) fds.push_back({c.fd, (short)(c.writing() ? POLLOUT : POLLIN), 0});
    if (wait_for(fds, conns, unblocked) < 0) return;  // EINTR: the caller checks the flag
    std::vector<Connection> kept;
    int64_t t = now_ms();
    for (size_t i = 0; i < conns.size(); i++) {
        Connection &c = conns[i];
        bool open = true;
        if (fds[i + 1].revents) open = c.writing() ? send_some(c) : receive_some(c, limits, respond);
        if (open && t >= c.deadline_ms) open = false;
        if (open) kept.push_back(std::move(c));
        else close(c.fd);
    }
    conns.swap(kept);
    if (fds[0].revents & POLLIN) accept_all(listen_fd, conns, limits);
}

}  // namespace

int listen_on(const std::string &spec, std::string *bound, std::string *why) {
    size_t colon = spec.rfind(':');
    if (colon == std::string::npos) {
        *why = "--listen " + spec + " has no port (HOST:PORT)";
        return -1;
    }
    std::string host = spec.substr(0, colon), port = spec.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    addrinfo hints{}, *res = nullptr;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
        *why = "--listen " + spec + ": " + gai_strerror(rc);
        return -1;
    }
    int fd = -1;
    for (addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0) break;
        *why = "cannot listen on " + spec + ": " + strerror(errno);
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return -1;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getsockname(fd, (sockaddr *)&ss, &len) == 0 &&
        getnameinfo((sockaddr *)&ss, len, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV) == 0)
        *bound = (ss.ss_family == AF_INET6 ? "[" + std::string(h) + "]" : std::string(h)) + ":" + p;
    return fd;
}

namespace {

// Whether SIGTERM or SIGINT waits, blocked: ppoll() lets them in only when it would sleep, so while
// some socket is ready at every round (a flood of connections) it never runs the handler.
bool stop_pending() {
    sigset_t pending;
    return sigpending(&pending) == 0 && (sigismember(&pending, SIGTERM) == 1 || sigismember(&pending, SIGINT) == 1);
}

// The connections the process's descriptors allow, a few kept for the ledgers a scrape opens.
ServerLimits within_descriptors(ServerLimits limits) {
    rlimit nofile{};
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
        limits.max_connections = (int)std::max<rlim_t>(
            1, std::min<rlim_t>((rlim_t)limits.max_connections, nofile.rlim_cur > 64 ? nofile.rlim_cur - 64 : 1));
    return limits;
}

}  // namespace

void serve(int listen_fd, const ServerLimits &asked, const Responder &respond, const std::function<void()> &ready) {
    const ServerLimits limits = within_descriptors(asked);
    struct sigaction sa {};
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    sigset_t stops, unblocked;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    sigprocmask(SIG_BLOCK, &stops, &unblocked);
    sigdelset(&unblocked, SIGTERM);
    sigdelset(&unblocked, SIGINT);
    ready();
    std::vector<Connection> conns;
    while (!g_stop && !stop_pending()) step(listen_fd, conns, limits, respond, unblocked);
    for (const Connection &c : conns) close(c.fd);
}

}  // namespace gg::exporter
