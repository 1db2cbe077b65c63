// `gpuguard exporter`: the container's quota for Prometheus. Serves /metrics over HTTP, each scrape
// read from the ledger(s) with no driver call (tools/exporter/metrics.h), so it runs as a sidecar
// that shares the training container's /dev/shm and nothing else. One request at a time: a scrape
// every few seconds is all it serves.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/settings/settings.h"
#include "tools/cli/args.h"
#include "tools/exporter/metrics.h"

namespace {

using gg::exporter::Format;
using gg::tool::Args;
using gg::tool::fail;

const char kUsage[] =
    "usage: gpuguard exporter [--listen HOST:PORT] [--ledger PATH ...] [--container NAME] [--once [--openmetrics]]\n"
    "\n"
    "Serves the container's GPU memory quota as Prometheus metrics at http://HOST:PORT/metrics, read\n"
    "from the shared ledger at each scrape (no driver call: it needs no GPU, only the ledger's /dev/shm).\n"
    "OpenMetrics for a client that asks for it (a Prometheus server does), else the text format 0.0.4.\n"
    "\n"
    "options:\n"
    "  --listen HOST:PORT  where to listen (default 127.0.0.1:9478; 0.0.0.0:9478 for a pod's sidecar;\n"
    "                      port 0 picks a free one, printed on standard error)\n"
    "  --ledger PATH       a ledger to export; repeat for several (default GPUGUARD_LEDGER, else\n"
    "                      /dev/shm/gpuguard-<uid>.ledger)\n"
    "  --container NAME    the container label (default HOSTNAME, the pod's name in Kubernetes)\n"
    "  --once              print the metrics once on standard output and exit\n"
    "  --openmetrics       with --once: OpenMetrics instead of the text format\n"
    "  -h, --help          this help\n"
    "\n"
    "Metrics: gpuguard_ledger_up; per device (labels gpu, UUID, modelName, as DCGM's exporter names\n"
    "them, and container, ledger) gpuguard_device_limit_bytes (absent without a limit),\n"
    "_used_bytes, _used_by_kind_bytes (kind: allocations, context_and_modules, graphs, pool_reserve;\n"
    "they sum to _used_bytes), _peak_bytes, _memory_total_bytes, _context_cost_bytes (source:\n"
    "own_process, device_delta, unknown), gpuguard_device_refusals_total; per process (pid, command)\n"
    "gpuguard_process_used_bytes, _used_by_kind_bytes, _peak_bytes per device, gpuguard_process_state\n"
    "(alive, dead, reclaimed); gpuguard_reports_total and gpuguard_reclaimed_processes_total. gpu is\n"
    "the ledger's index of the device (the same for every process), not a CUDA ordinal: match devices\n"
    "by UUID.\n"
    "\n"
    "Exit status: 0 stopped by SIGTERM or SIGINT (or --once done); 1 cannot listen; 2 bad usage.\n";

volatile sig_atomic_t g_stop = 0;
void on_stop(int) { g_stop = 1; }

std::string scrape(const std::vector<std::string> &ledgers, const std::string &container, Format f) {
    std::vector<gg::exporter::LedgerSample> samples;
    for (const std::string &p : ledgers) samples.push_back(gg::exporter::sample(p));
    return gg::exporter::render(samples, container, f);
}

// HOST:PORT, [V6]:PORT or :PORT into a listening socket. -1 with *why.
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
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) break;
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

void send_all(int fd, const std::string &s) {
    size_t off = 0;
    while (off < s.size()) {
        ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        off += (size_t)n;
    }
}

// Reads one request's head (up to 16 KiB, two seconds), answers it and closes the connection.
void serve_one(int fd, const std::vector<std::string> &ledgers, const std::string &container) {
    std::string req;
    char buf[4096];
    while (req.find("\r\n\r\n") == std::string::npos && req.size() < 16384) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 2000) <= 0) break;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, (size_t)n);
    }
    std::string line = req.substr(0, req.find("\r\n"));
    std::string status = "200 OK", type = "text/plain; charset=utf-8", body;
    bool head = line.rfind("HEAD ", 0) == 0;
    if (line.rfind("GET ", 0) != 0 && !head) {
        status = "405 Method Not Allowed";
        body = "gpuguard exporter: GET /metrics\n";
    } else {
        std::string path = line.substr(line.find(' ') + 1);
        path = path.substr(0, path.find(' '));
        path = path.substr(0, path.find('?'));
        if (path == "/metrics") {
            // A Prometheus server lists OpenMetrics first in its Accept header; anything else gets text.
            std::string lower = req;
            for (char &c : lower) c = (char)tolower((unsigned char)c);
            Format f =
                lower.find("application/openmetrics-text") != std::string::npos ? Format::kOpenMetrics : Format::kText;
            body = scrape(ledgers, container, f);
            type = gg::exporter::content_type(f);
        } else if (path == "/") {
            body = "gpuguard exporter: the metrics are at /metrics\n";
        } else {
            status = "404 Not Found";
            body = "gpuguard exporter: no " + path + " here; the metrics are at /metrics\n";
        }
    }
    send_all(fd, "HTTP/1.1 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + (head ? "" : body));
    close(fd);
}

}  // namespace

int cmd_exporter(int argc, char **argv) {
    std::string listen = "127.0.0.1:9478", container, v;
    std::vector<std::string> ledgers;
    bool once = false, openmetrics = false, have_container = false;
    Args a("exporter", argc, argv);
    while (!a.done()) {
        if (a.flag("-h") || a.flag("--help")) {
            fputs(kUsage, stdout);
            return 0;
        } else if (a.flag("--once")) {
            once = true;
        } else if (a.flag("--openmetrics")) {
            openmetrics = true;
        } else if (a.option("--listen", "HOST:PORT", &listen)) {
            if (a.failed() || listen.empty()) return a.usage_error("--listen needs HOST:PORT");
        } else if (a.option("--ledger", "a path", &v)) {
            if (a.failed() || v.empty()) return a.usage_error("--ledger needs a path");
            ledgers.push_back(v);
        } else if (a.option("--container", "a name", &container)) {
            if (a.failed()) return a.usage_error();
            have_container = true;
        } else {
            return a.usage_error("unknown argument '" + a.next() + "'");
        }
    }
    if (openmetrics && !once) return a.usage_error("--openmetrics applies to --once (a server asks for its format)");
    if (ledgers.empty()) {
        std::string path = gg::settings::read_ledger_path(gg::settings::process_env());
        if (path.empty())
            return a.usage_error(
                "GPUGUARD_LEDGER says a per-process quota, with no shared ledger to export; pass --ledger PATH");
        ledgers.push_back(path);
    }
    if (!have_container) {
        const char *h = gg::settings::env("HOSTNAME");
        container = h ? h : "";
    }
    if (once) {
        fputs(scrape(ledgers, container, openmetrics ? Format::kOpenMetrics : Format::kText).c_str(), stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    std::string bound, why;
    int fd = listen_on(listen, &bound, &why);
    if (fd < 0) return fail(1, why);
    struct sigaction sa {};
    sa.sa_handler = on_stop;  // no SA_RESTART: poll returns at once
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    fprintf(stderr, "gpuguard: exporter listening on http://%s/metrics\n", bound.c_str());
    while (!g_stop) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 1000) <= 0) continue;
        int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) serve_one(c, ledgers, container);
    }
    close(fd);
    return 0;
}
