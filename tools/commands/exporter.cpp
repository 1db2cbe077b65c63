// `gpuguard exporter`: the container's quota for Prometheus. Serves /metrics over HTTP, each scrape
// read from the ledger(s) with no driver call (tools/exporter/metrics.h), so it runs as a sidecar
// that shares the training container's /dev/shm and nothing else. The HTTP server, bounded so that
// no client can hold it, is tools/exporter/server.h.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/settings/settings.h"
#include "tools/cli/args.h"
#include "tools/exporter/metrics.h"
#include "tools/exporter/server.h"

namespace {

using gg::exporter::Format;
using gg::tool::Args;
using gg::tool::fail;

const char kUsage[] =
    "usage: gpuguard exporter [--listen HOST:PORT] [--ledger PATH ...] [--container NAME] [--once [--openmetrics]]\n"
    "                         [--command-label] [--max-connections N] [--read-timeout SECONDS] [--write-timeout SECONDS]\n"
    "\n"
    "Serves the container's GPU memory quota as Prometheus metrics at http://HOST:PORT/metrics, read\n"
    "from the shared ledger at each scrape (no driver call: it needs no GPU, only the ledger's /dev/shm).\n"
    "OpenMetrics for a client that asks for it (a Prometheus server does), else the text format 0.0.4.\n"
    "\n"
    "options:\n"
    "  --listen HOST:PORT  where to listen (default 127.0.0.1:9478, this machine only); :PORT or\n"
    "                      0.0.0.0:PORT listens on every address, reachable by anyone who can reach\n"
    "                      the machine or pod (in a pod, prefer the pod's own IP and a NetworkPolicy:\n"
    "                      examples/k8s/pod-with-exporter.yaml); port 0 picks a free one, printed on\n"
    "                      standard error\n"
    "  --ledger PATH       a ledger to export; repeat for several (default GPUGUARD_LEDGER, else\n"
    "                      /dev/shm/gpuguard-<uid>.ledger)\n"
    "  --container NAME    the container label (default HOSTNAME, the pod's name in Kubernetes)\n"
    "  --once              print the metrics once on standard output and exit\n"
    "  --openmetrics       with --once: OpenMetrics instead of the text format\n"
    "  --command-label     label each process with its command line (off: a token in argv would reach\n"
    "                      anyone who can scrape; on, what looks like a secret is still shown as ***)\n"
    "  --max-connections N connections open at once (default 16); one more closes the one that has\n"
    "                      sent nothing for longest (never one being answered)\n"
    "  --read-timeout SECONDS   the whole request, from connect to its last header (default 5)\n"
    "  --write-timeout SECONDS  the whole response, from its first byte to its last (default 10,\n"
    "                      Prometheus's scrape timeout); a client that reads no faster is dropped\n"
    "  -h, --help          this help\n"
    "\n"
    "Metrics: gpuguard_ledger_up; per device (labels gpu, UUID, modelName, as DCGM's exporter names\n"
    "them, and container, ledger) gpuguard_device_limit_bytes (absent without a limit),\n"
    "_used_bytes, _used_by_kind_bytes (kind: allocations, context_and_modules, graphs, pool_reserve;\n"
    "they sum to _used_bytes), _peak_bytes, _memory_total_bytes, _context_cost_bytes (source:\n"
    "own_process, device_delta, unknown), gpuguard_device_refusals_total; per process (process, pid,\n"
    "command with --command-label; process is SLOT.GENERATION, one process of the ledger for its life, where pids collide\n"
    "across PID namespaces) gpuguard_process_used_bytes, _used_by_kind_bytes, _peak_bytes per device, gpuguard_process_state\n"
    "(alive, dead, reclaimed); gpuguard_reports_total and gpuguard_reclaimed_processes_total. gpu is\n"
    "the ledger's index of the device (the same for every process), not a CUDA ordinal: match devices\n"
    "by UUID.\n"
    "\n"
    "Exit status: 0 stopped by SIGTERM or SIGINT (or --once done); 1 cannot listen; 2 bad usage.\n";

std::string scrape(const std::vector<std::string> &ledgers, const gg::exporter::Labels &labels, Format f) {
    std::vector<gg::exporter::LedgerSample> samples;
    for (const std::string &p : ledgers) samples.push_back(gg::exporter::sample(p));
    return gg::exporter::render(samples, labels, f);
}

// The scrapes asked for within a second of each other share one body (tools/exporter/server.h): a
// Prometheus server scrapes every few seconds or more, and clients that come together get the same
// metrics, held once however slowly they read.
constexpr int64_t kScrapeGenerationMs = 1000;

// The response to one request head (tools/exporter/server.h reads it and sends this).
gg::exporter::Response respond(const std::string &req, const std::vector<std::string> &ledgers,
                               const gg::exporter::Labels &labels, gg::exporter::SharedBodies &bodies) {
    std::string line = req.substr(0, req.find("\r\n"));
    std::string status = "200 OK", type = "text/plain; charset=utf-8";
    std::shared_ptr<const std::string> body;
    bool head = line.rfind("HEAD ", 0) == 0;
    auto text = [](std::string t) { return std::make_shared<const std::string>(std::move(t)); };
    if (line.rfind("GET ", 0) != 0 && !head) {
        status = "405 Method Not Allowed";
        body = text("gpuguard exporter: GET /metrics\n");
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
            body = bodies.get((int)f, [&] { return scrape(ledgers, labels, f); });
            type = gg::exporter::content_type(f);
        } else if (path == "/") {
            body = text("gpuguard exporter: the metrics are at /metrics\n");
        } else {
            status = "404 Not Found";
            body = text("gpuguard exporter: no " + path + " here; the metrics are at /metrics\n");
        }
    }
    std::string headers = "HTTP/1.1 " + status + "\r\nContent-Type: " + type +
                          "\r\nContent-Length: " + std::to_string(body->size()) + "\r\nConnection: close\r\n\r\n";
    return {headers, head ? nullptr : body};
}

// A time limit in seconds (fractions allowed) into milliseconds; -1 when it is not one.
int deadline_ms(const std::string &seconds) {
    char *end = nullptr;
    double v = strtod(seconds.c_str(), &end);
    if (seconds.empty() || *end || !(v >= 0.01 && v <= 3600)) return -1;
    return (int)(v * 1000);
}

struct Options {
    std::string listen = "127.0.0.1:9478";
    gg::exporter::Labels labels;
    std::vector<std::string> ledgers;
    bool once = false, openmetrics = false, have_container = false;
    gg::exporter::ServerLimits limits;
};

// The server's bounds: true when the current argument was one of them (*status 2 when it was bad).
// A --listen without a numeric port is bad usage (exit 2), caught here; a host or port the system
// refuses is "cannot listen" (exit 1), found by listen_on.
bool has_numeric_port(const std::string &spec) {
    size_t colon = spec.rfind(':');
    if (colon == std::string::npos || colon + 1 == spec.size() || spec.size() - colon > 6) return false;
    return spec.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
           std::stoul(spec.substr(colon + 1)) <= 65535;
}

bool limit_option(Args &a, Options &o, int *status) {
    std::string v;
    if (a.option("--max-connections", "a number", &v)) {
        char *end = nullptr;
        long n = strtol(v.c_str(), &end, 10);
        if (a.failed() || v.empty() || *end || n < 1 || n > 1024)
            *status = a.usage_error("--max-connections needs a number from 1 to 1024");
        else o.limits.max_connections = (int)n;
    } else if (a.option("--read-timeout", "seconds", &v)) {
        o.limits.request_deadline_ms = deadline_ms(v);
        if (a.failed() || o.limits.request_deadline_ms < 0)
            *status = a.usage_error("--read-timeout needs seconds from 0.01 to 3600");
    } else if (a.option("--write-timeout", "seconds", &v)) {
        o.limits.write_deadline_ms = deadline_ms(v);
        if (a.failed() || o.limits.write_deadline_ms < 0)
            *status = a.usage_error("--write-timeout needs seconds from 0.01 to 3600");
    } else {
        return false;
    }
    return true;
}

// -1 when the arguments are good, else the status to exit with (0 for --help).
int parse(int argc, char **argv, Options &o) {
    std::string v;
    Args a("exporter", argc, argv);
    int status = -1;
    while (!a.done() && status < 0) {
        if (a.flag("-h") || a.flag("--help")) {
            fputs(kUsage, stdout);
            return 0;
        } else if (a.flag("--once")) {
            o.once = true;
        } else if (a.flag("--openmetrics")) {
            o.openmetrics = true;
        } else if (a.flag("--command-label")) {
            o.labels.command = true;
        } else if (a.option("--listen", "HOST:PORT", &o.listen)) {
            if (a.failed() || !has_numeric_port(o.listen))
                return a.usage_error("--listen " + o.listen + " is not HOST:PORT");
        } else if (a.option("--ledger", "a path", &v)) {
            if (a.failed() || v.empty()) return a.usage_error("--ledger needs a path");
            o.ledgers.push_back(v);
        } else if (a.option("--container", "a name", &o.labels.container)) {
            if (a.failed()) return a.usage_error();
            o.have_container = true;
        } else if (!limit_option(a, o, &status)) {
            return a.usage_error("unknown argument '" + a.next() + "'");
        }
    }
    if (status >= 0) return status;
    if (o.openmetrics && !o.once)
        return a.usage_error("--openmetrics applies to --once (a server asks for its format)");
    if (o.ledgers.empty()) {
        std::string path = gg::settings::read_ledger_path(gg::settings::process_env());
        if (path.empty())
            return a.usage_error(
                "GPUGUARD_LEDGER says a per-process quota, with no shared ledger to export; pass --ledger PATH");
        o.ledgers.push_back(path);
    }
    return -1;
}

}  // namespace

int cmd_exporter(int argc, char **argv) {
    Options o;
    int status = parse(argc, argv, o);
    if (status >= 0) return status;
    if (!o.have_container) {
        const char *h = gg::settings::env("HOSTNAME");
        o.labels.container = h ? h : "";
    }
    if (o.once) {
        fputs(scrape(o.ledgers, o.labels, o.openmetrics ? Format::kOpenMetrics : Format::kText).c_str(), stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    std::string bound, why;
    int fd = gg::exporter::listen_on(o.listen, &bound, &why);
    if (fd < 0) return fail(1, why);
    // Announced once SIGTERM is caught: a supervisor that stops it after reading the line gets exit 0.
    gg::exporter::SharedBodies bodies(kScrapeGenerationMs);
    gg::exporter::serve(
        fd, o.limits, [&](const std::string &head) { return respond(head, o.ledgers, o.labels, bodies); },
        [&] { fprintf(stderr, "gpuguard: exporter listening on http://%s/metrics\n", bound.c_str()); });
    close(fd);
    return 0;
}
