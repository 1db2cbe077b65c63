// The exporter's HTTP server: one thread, one poll loop, every connection non-blocking and bounded
// (issue 29). A Prometheus server scrapes every few seconds, so what matters is not throughput but
// that no client can hold the exporter: a request that trickles in (one byte a second), connections
// that say nothing, or a client that never reads its response. Each connection therefore has a
// deadline for its whole request head and another for its whole response, however many bytes move
// in between; the connections are bounded in number, the oldest still reading giving way to a new
// one; and SIGTERM/SIGINT end the loop at once, whatever the connections are doing.
//
// Own code rather than a library: the command is one binary that loads on glibc 2.17
// (common/floor/), with its C++ runtime linked in, and the wheel ships it as it is; a shared HTTP
// library (libmicrohttpd, civetweb) would be one more dependency the wheel cannot carry and the floor
// would have to cover, for a server that answers one GET.
#pragma once
#include <csignal>
#include <functional>
#include <string>

namespace gg::exporter {

struct ServerLimits {
    int max_connections = 16;        // open at once; a new one closes the oldest still reading
    int request_deadline_ms = 5000;  // from accept to the end of the request head
    int write_deadline_ms = 10000;   // from the response's first byte to its last (Prometheus's timeout)
};

// The complete response (status line, headers and body) to a request head: the text up to and with
// the blank line, or what came of it (16 KiB at most, or less when the client closed).
using Responder = std::function<std::string(const std::string &head)>;

// HOST:PORT, [V6]:PORT or :PORT (every address) into a listening socket. -1 with *why; *bound gets
// the address as bound (with the port picked for port 0).
int listen_on(const std::string &spec, std::string *bound, std::string *why);

// Serves `listen_fd` until SIGTERM or SIGINT, which this catches (and blocks but while it waits, so
// that a signal never falls between the check of the flag and the wait) before it calls `ready`.
// Closes every connection and returns.
void serve(int listen_fd, const ServerLimits &limits, const Responder &respond, const std::function<void()> &ready);

}  // namespace gg::exporter
