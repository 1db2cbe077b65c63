// The exporter's HTTP server: one thread, one poll loop, every connection non-blocking and bounded
// (issue 29). A Prometheus server scrapes every few seconds, so what matters is not throughput but
// that no client can hold the exporter: a request that trickles in (one byte a second), connections
// that say nothing, or a client that never reads its response. Each connection therefore has a
// deadline for its whole request head and another for its whole response, however many bytes move
// in between; the connections are bounded in number, one that has sent nothing for longest giving
// way to a new one (never one being answered); and SIGTERM/SIGINT end the loop at once, whatever the
// connections are doing. A response sent, the server shuts its side and reads what the client still
// sends (bounded) before it closes: a close with unread input sends a reset, which can destroy the
// response before the client has read it.
//
// Own code rather than a library: the command is one binary that loads on glibc 2.17
// (common/floor/), with its C++ runtime linked in, and the wheel ships it as it is; a shared HTTP
// library (libmicrohttpd, civetweb) would be one more dependency the wheel cannot carry and the floor
// would have to cover, for a server that answers one GET.
#pragma once
#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gg::exporter {

struct ServerLimits {
    int max_connections = 16;        // open at once; a new one closes the one idle longest (never a writer)
    int request_deadline_ms = 5000;  // from accept to the end of the request head
    int write_deadline_ms = 10000;   // from the response's first byte to its last (Prometheus's timeout)
};

// The response to a request head (the text up to and with the blank line, or what came of it: 16 KiB
// at most, or less when the client closed): its status line and headers, then its body, which the
// connections answered with the same scrape share rather than copy.
struct Response {
    std::string head;
    std::shared_ptr<const std::string> body;  // null for none
};
using Responder = std::function<Response(const std::string &head)>;

// One body per scrape generation: the bodies asked for within generation_ms of the one made first
// are that one, immutable and shared, so that 16 clients reading a 10 MB body slowly hold one body
// rather than 16. A body is made again once its generation is over; one still being sent stays alive
// with its connections (at most write_deadline_ms / generation_ms of them per key).
class SharedBodies {
public:
    explicit SharedBodies(int64_t generation_ms) : generation_ms_(generation_ms) {}
    std::shared_ptr<const std::string> get(int key, const std::function<std::string()> &make);

private:
    struct Generation {
        int key;
        int64_t made_ms;
        std::shared_ptr<const std::string> body;
    };
    int64_t generation_ms_;
    std::vector<Generation> current_;
};

// HOST:PORT, [V6]:PORT or :PORT (every address) into a listening socket. -1 with *why; *bound gets
// the address as bound (with the port picked for port 0).
int listen_on(const std::string &spec, std::string *bound, std::string *why);

// Serves `listen_fd` until SIGTERM or SIGINT, which this catches (and blocks but while it waits, so
// that a signal never falls between the check of the flag and the wait) before it calls `ready`.
// Closes every connection and returns.
void serve(int listen_fd, const ServerLimits &limits, const Responder &respond, const std::function<void()> &ready);

}  // namespace gg::exporter
