#include "tools/exporter/metrics.h"

#include <cstdio>
#include <cstring>
#include <memory>

namespace gg::exporter {
namespace {

using ledger::Ledger;

// One family: its samples are appended by the caller, its header written once before them.
struct Family {
    const char *name;  // without _total for a counter
    const char *type;  // gauge, counter, stateset
    const char *help;
    bool bytes;  // OpenMetrics: # UNIT bytes
    std::string samples;
};

std::string number(uint64_t v) { return std::to_string(v); }

bool valid_utf8_at(const std::string &s, size_t i, size_t *len) {
    unsigned char c = (unsigned char)s[i];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || i + n > s.size()) return false;
    for (size_t k = 1; k < n; k++)
        if (((unsigned char)s[i + k] >> 6) != 2) return false;
    *len = n;
    return true;
}

std::string labels(const std::vector<std::pair<const char *, std::string>> &pairs) {
    std::string out;
    for (const auto &[k, v] : pairs) {
        if (!out.empty()) out += ",";
        out += std::string(k) + "=\"" + escape_label(v) + "\"";
    }
    return "{" + out + "}";
}

}  // namespace

std::string escape_label(const std::string &value) {
    std::string out;
    for (size_t i = 0; i < value.size();) {
        size_t n = 1;
        char c = value[i];
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else if (!valid_utf8_at(value, i, &n)) out += "?", n = 1;
        else out.append(value, i, n);
        i += n;
    }
    return out;
}

LedgerSample sample(const std::string &path) {
    LedgerSample s;
    s.path = path;
    ledger::OpenOptions o;
    o.path = path;
    o.read_only = true;
    std::string error, notice;
    std::unique_ptr<Ledger> l(Ledger::open(o, &error, &notice));
    if (!l) return s;
    s.up = true;
    s.limit_spec = l->limit_spec();
    s.devices = l->devices();
    s.processes = l->processes();
    s.counters = l->counters();
    return s;
}

const char *content_type(Format f) {
    return f == Format::kOpenMetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                     : "text/plain; version=0.0.4; charset=utf-8";
}

std::string render(const std::vector<LedgerSample> &ledgers, const std::string &container, Format f) {
    Family up{"gpuguard_ledger_up", "gauge", "1 when the ledger was read, 0 when there is none yet or it is unreadable",
              false, ""};
    Family limit{"gpuguard_device_limit_bytes", "gauge", "the quota on the device (absent: no limit)", true, ""};
    Family used{"gpuguard_device_used_bytes", "gauge", "bytes the container's processes hold on the device", true, ""};
    Family peak{"gpuguard_device_peak_bytes", "gauge", "the container's highest usage of the device", true, ""};
    Family total{"gpuguard_device_memory_total_bytes", "gauge", "the device's physical memory, as the driver said",
                 true, ""};
    Family refusals{"gpuguard_device_refusals", "counter", "allocations the quota refused on the device", false, ""};
    Family pbytes{"gpuguard_process_used_bytes", "gauge", "bytes a process holds on the device", true, ""};
    Family ppeak{"gpuguard_process_peak_bytes", "gauge", "a process's highest usage of the device", true, ""};
    Family pstate{"gpuguard_process_state", "stateset",
                  "a process of the ledger: alive, dead (its bytes not yet reclaimed) or reclaimed", false, ""};
    Family reports{"gpuguard_reports", "counter", "reports written by the ledger's processes", false, ""};
    Family reclaimed{"gpuguard_reclaimed_processes", "counter", "dead processes whose bytes were given back", false,
                     ""};
    auto add = [](Family &fam, const std::string &lbl, const std::string &value) {
        std::string name = fam.name;
        if (!strcmp(fam.type, "counter")) name += "_total";
        fam.samples += name + lbl + " " + value + "\n";
    };
    for (const LedgerSample &s : ledgers) {
        std::vector<std::pair<const char *, std::string>> base;
        if (!container.empty()) base.push_back({"container", container});
        base.push_back({"ledger", s.path});
        add(up, labels(base), s.up ? "1" : "0");
        if (!s.up) continue;
        add(reports, labels(base), number(s.counters.reports_written));
        add(reclaimed, labels(base), number(s.counters.reclaimed_processes));
        for (const auto &d : s.devices) {
            auto dl = base;
            dl.push_back({"gpu", std::to_string(d.index)});
            dl.push_back({"UUID", d.uuid});
            dl.push_back({"modelName", d.name});
            std::string l = labels(dl);
            if (d.limit != ledger::kNoLimit) add(limit, l, number(d.limit));
            add(used, l, number(d.used));
            add(peak, l, number(d.peak));
            add(total, l, number(d.physical_total));
            add(refusals, l, number(d.refusals));
        }
        for (const auto &p : s.processes) {
            const char *state = p.alive ? "alive" : p.reclaimed ? "reclaimed" : "dead";
            for (const char *st : {"alive", "dead", "reclaimed"}) {
                auto pl = base;
                pl.push_back({"pid", std::to_string(p.pid)});
                pl.push_back({"command", p.command});
                // A stateset's label is the family's name (OpenMetrics).
                pl.push_back({"gpuguard_process_state", st});
                add(pstate, labels(pl), strcmp(st, state) ? "0" : "1");
            }
            for (const auto &d : s.devices) {
                size_t i = (size_t)d.index;
                if (i >= p.bytes.size() || (!p.bytes[i] && !p.peak[i])) continue;
                auto pl = base;
                pl.push_back({"gpu", std::to_string(d.index)});
                pl.push_back({"UUID", d.uuid});
                pl.push_back({"pid", std::to_string(p.pid)});
                pl.push_back({"command", p.command});
                std::string l = labels(pl);
                add(pbytes, l, number(p.bytes[i]));
                add(ppeak, l, number(p.peak[i]));
            }
        }
    }
    std::string out;
    for (Family *fam : {&up, &limit, &used, &peak, &total, &refusals, &pbytes, &ppeak, &pstate, &reports, &reclaimed}) {
        // The text format knows no stateset (a gauge there) and names a counter with its _total.
        std::string name = fam->name;
        const char *type = fam->type;
        if (f == Format::kText) {
            if (!strcmp(type, "counter")) name += "_total";
            if (!strcmp(type, "stateset")) type = "gauge";
        }
        out += "# HELP " + name + " " + fam->help + "\n";
        out += "# TYPE " + name + " " + type + "\n";
        if (f == Format::kOpenMetrics && fam->bytes) out += "# UNIT " + name + " bytes\n";
        out += fam->samples;
    }
    if (f == Format::kOpenMetrics) out += "# EOF\n";
    return out;
}

}  // namespace gg::exporter
