#include "tools/exporter/server.h"

#include <netdb.h>
#include <poll.h>
#include <sys/ioctl.h>
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

// After the response: how long and how much the server reads of what the client still sends before
// it closes (a client that has read its response closes at once; one that keeps sending is cut off).
constexpr int kLingerMs = 1000;
constexpr size_t kMaxDrain = 65536;

enum class Phase { kReading, kWriting, kClosing };

struct Connection {
    int fd;
    int64_t accepted_ms;
    int64_t deadline_ms;    // of the request head while reading, of the response while writing
    int64_t last_input_ms;  // when a byte of the request last came (accepted_ms before any)
    std::string in;         // the request head so far
    Response out;           // the response, once the head is in
    size_t sent = 0;        // of out.head, then of the body
    size_t drained = 0;     // bytes read and dropped while closing
    Phase phase = Phase::kReading;
};

bool head_complete(const std::string &in) { return in.find("\r\n\r\n") != std::string::npos || in.size() >= kMaxHead; }

// Shuts the sending side (the client reads the end of the response) and waits, bounded, for the
// client's end before closing: see server.h.
bool start_closing(Connection &c) {
    if (shutdown(c.fd, SHUT_WR) != 0) return false;
    c.phase = Phase::kClosing;
    c.deadline_ms = now_ms() + kLingerMs;
    return true;
}

// Reads and drops what the client still sends. False once it closed its side, or sent too much.
bool drain_some(Connection &c) {
    char buf[4096];
    while (c.drained < kMaxDrain) {
        ssize_t n = recv(c.fd, buf, sizeof buf, 0);
        if (n > 0) {
            c.drained += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return false;
}

// Sends what the socket takes now. False once the connection is done with: all sent, or broken.
bool send_some(Connection &c) {
    static const std::string kNoBody;
    const std::string &body = c.out.body ? *c.out.body : kNoBody;
    size_t total = c.out.head.size() + body.size();
    while (c.sent < total) {
        bool in_head = c.sent < c.out.head.size();
        const char *from = in_head ? c.out.head.data() + c.sent : body.data() + (c.sent - c.out.head.size());
        size_t left = in_head ? c.out.head.size() - c.sent : total - c.sent;
        ssize_t n = send(c.fd, from, left, MSG_NOSIGNAL | (in_head && !body.empty() ? MSG_MORE : 0));
        if (n > 0) {
            c.sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    return start_closing(c);
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
            c.last_input_ms = now_ms();
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        closed = true;  // the client shut its side: answer what came, if anything did
        break;
    }
    if (closed && c.in.empty()) return false;
    c.out = respond(c.in);
    c.phase = Phase::kWriting;
    c.deadline_ms = now_ms() + limits.write_deadline_ms;
    return send_some(c);
}

// Whether a reader has sent anything: bytes read, or bytes waiting that the loop has not read yet
// (its request may have come in the very round that a flood fills the table).
bool has_sent(const Connection &c) {
    int waiting = 0;
    return !c.in.empty() || (ioctl(c.fd, FIONREAD, &waiting) == 0 && waiting > 0);
}

// Which connection gives way to a new one, the first kind first: one closing (its response is
// sent); one that has sent nothing, the oldest first (a connection that says nothing); one whose
// request is coming, the one silent longest (a trickler). Never one being answered: conns.size()
// when every connection is.
size_t pick_victim(const std::vector<Connection> &conns) {
    size_t victim = conns.size();
    int victim_rank = 3;
    int64_t victim_since = 0;
    for (size_t i = 0; i < conns.size(); i++) {
        const Connection &c = conns[i];
        if (c.phase == Phase::kWriting) continue;
        int rank = c.phase == Phase::kClosing ? 0 : has_sent(c) ? 2 : 1;
        int64_t since = rank == 2 ? c.last_input_ms : c.accepted_ms;
        if (rank < victim_rank || (rank == victim_rank && since < victim_since)) {
            victim = i;
            victim_rank = rank;
            victim_since = since;
        }
    }
    return victim;
}

// Room for one more connection; false when every connection is being answered.
bool make_room(std::vector<Connection> &conns) {
    size_t victim = pick_victim(conns);
    if (victim == conns.size()) return false;
    close(conns[victim].fd);
    conns.erase(conns.begin() + (long)victim);
    return true;
}

// At most max_connections a round: a flood of connections is served in turns with the connections
// already open, not drained whole before them.
void accept_all(int listen_fd, std::vector<Connection> &conns, const ServerLimits &limits) {
    for (int accepted = 0; accepted < limits.max_connections; accepted++) {
        int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        // Out of descriptors: one connection goes, as when full.
        if (fd < 0 && (errno == EMFILE || errno == ENFILE) && make_room(conns))
            fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) return;  // EAGAIN: none left; anything else (a reset) is retried at the next wakeup
        if ((int)conns.size() >= limits.max_connections && !make_room(conns)) {
            close(fd);  // every connection is being answered: the newcomer waits for none of them
            continue;
        }
        int64_t t = now_ms();
        Connection c{};
        c.fd = fd;
        c.accepted_ms = c.last_input_ms = t;
        c.deadline_ms = t + limits.request_deadline_ms;
        conns.push_back(std::move(c));
    }
}

// What a ready connection does in its phase. False once it is done with.
bool advance(Connection &c, const ServerLimits &limits, const Responder &respond) {
    switch (c.phase) {
        case Phase::kReading: return receive_some(c, limits, respond);
        case Phase::kWriting: return send_some(c);
        case Phase::kClosing: return drain_some(c);
    }
    return false;
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
    for (const Connection &c : conns) fds.push_back({c.fd, (short)(c.phase == Phase::kWriting ? POLLOUT : POLLIN), 0});
    if (wait_for(fds, conns, unblocked) < 0) return;  // EINTR: the caller checks the flag
    std::vector<Connection> kept;
    int64_t t = now_ms();
    for (size_t i = 0; i < conns.size(); i++) {
        Connection &c = conns[i];
        bool open = true;
        if (fds[i + 1].revents) open = advance(c, limits, respond);
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

std::shared_ptr<const std::string> SharedBodies::get(int key, const std::function<std::string()> &make) {
    int64_t t = now_ms();
    for (Generation &g : current_)
        if (g.key == key && t - g.made_ms < generation_ms_) return g.body;
    // Dropped from here before the next is made: a body still being sent lives on in its connections.
    current_.erase(std::remove_if(current_.begin(), current_.end(), [&](const Generation &g) { return g.key == key; }),
                   current_.end());
    auto body = std::make_shared<const std::string>(make());
    current_.push_back({key, t, body});
    return body;
}

}  // namespace gg::exporter
