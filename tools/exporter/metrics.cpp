#include "tools/exporter/metrics.h"

#include <cctype>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/report/schema.h"

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

// The kind label's values, in Kind's order, then the allocations: the names reports and `gpuguard top
// --json` give them (common/report/schema.h), so that a query and a report say the same thing.
namespace key = schema::key;
const char *const kKindLabel[ledger::kKinds] = {key::context_and_modules, key::graphs, key::pool_reserve};
const char *const kAllocationsLabel = key::allocations;

const char *cost_source_label(ledger::CostSource s) {
    return s == ledger::kCostOwnProcess ? "own_process" : s == ledger::kCostDeviceDelta ? "device_delta" : "unknown";
}

}  // namespace

std::array<uint64_t, ledger::kKinds + 1> split_by_kind(uint64_t total,
                                                       const std::array<uint64_t, ledger::kKinds> &kinds) {
    std::array<uint64_t, ledger::kKinds + 1> out{};
    uint64_t left = total;
    for (int k = 0; k < ledger::kKinds; k++) {
        out[(size_t)k] = kinds[(size_t)k] < left ? kinds[(size_t)k] : left;
        left -= out[(size_t)k];
    }
    out[ledger::kKinds] = left;
    return out;
}

namespace {

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

namespace {

using LabelList = std::vector<std::pair<const char *, std::string>>;

// Every family of the exposition, in the order it is written.
struct Families {
    Family up{"gpuguard_ledger_up", "gauge", "1 when the ledger was read, 0 when there is none yet or it is unreadable",
              false, ""};
    Family limit{"gpuguard_device_limit_bytes", "gauge", "the quota on the device (absent: no limit)", true, ""};
    Family used{"gpuguard_device_used_bytes", "gauge", "bytes the container's processes hold on the device", true, ""};
    Family kinds{"gpuguard_device_used_by_kind_bytes", "gauge",
                 "gpuguard_device_used_bytes split by kind: allocations, context_and_modules (CUDA contexts and "
                 "the modules loaded into them), graphs (CUDA graphs' memory pool), pool_reserve (what "
                 "stream-ordered pools keep beyond their live allocations); the kinds of a device sum to "
                 "gpuguard_device_used_bytes",
                 true, ""};
    Family peak{"gpuguard_device_peak_bytes", "gauge", "the container's highest usage of the device", true, ""};
    Family total{"gpuguard_device_memory_total_bytes", "gauge", "the device's physical memory, as the driver said",
                 true, ""};
    Family cost{"gpuguard_device_context_cost_bytes", "gauge",
                "what one CUDA context costs on the device as gpuguard measured it, charged to every process "
                "that makes one; source: own_process (NVML's figure of the measuring process), device_delta "
                "(the device's used memory around the context) or unknown (not measured yet, 0)",
                true, ""};
    Family refusals{"gpuguard_device_refusals", "counter", "allocations the quota refused on the device", false, ""};
    Family pbytes{"gpuguard_process_used_bytes", "gauge", "bytes a process holds on the device", true, ""};
    Family pkinds{"gpuguard_process_used_by_kind_bytes", "gauge",
                  "gpuguard_process_used_bytes split by kind (the kinds of gpuguard_device_used_by_kind_bytes); "
                  "the kinds of a process and device sum to gpuguard_process_used_bytes",
                  true, ""};
    Family ppeak{"gpuguard_process_peak_bytes", "gauge", "a process's highest usage of the device", true, ""};
    Family pstate{"gpuguard_process_state", "stateset",
                  "a process of the ledger: alive, dead (its bytes not yet reclaimed) or reclaimed", false, ""};
    Family reports{"gpuguard_reports", "counter", "reports written by the ledger's processes", false, ""};
    Family reclaimed{"gpuguard_reclaimed_processes", "counter", "dead processes whose bytes were given back", false,
                     ""};

    std::vector<Family *> in_order() {
        return {&up,       &limit,  &used,   &kinds, &peak,   &total,   &cost,
                &refusals, &pbytes, &pkinds, &ppeak, &pstate, &reports, &reclaimed};
    }
};

void add(Family &fam, const std::string &lbl, const std::string &value) {
    std::string name = fam.name;
    if (!strcmp(fam.type, "counter")) name += "_total";
    fam.samples += name + lbl + " " + value + "\n";
}

// One series per kind, allocations first, with `kind` added to the labels.
void add_kinds(Family &fam, const LabelList &lbl, uint64_t total, const std::array<uint64_t, ledger::kKinds> &k) {
    std::array<uint64_t, ledger::kKinds + 1> parts = split_by_kind(total, k);
    auto kl = lbl;
    kl.push_back({"kind", kAllocationsLabel});
    add(fam, labels(kl), number(parts[ledger::kKinds]));
    for (int j = 0; j < ledger::kKinds; j++) {
        kl.back().second = kKindLabel[j];
        add(fam, labels(kl), number(parts[(size_t)j]));
    }
}

void add_device(Families &fams, const LabelList &base, const Ledger::DeviceView &d) {
    auto dl = base;
    dl.push_back({"gpu", std::to_string(d.index)});
    dl.push_back({"UUID", d.uuid});
    dl.push_back({"modelName", d.name});
    std::string l = labels(dl);
    if (d.limit != ledger::kNoLimit) add(fams.limit, l, number(d.limit));
    add(fams.used, l, number(d.used));
    // The same labels and one more, kind: the sum of a device's series is its used figure.
    add_kinds(fams.kinds, dl, d.used, d.kinds);
    add(fams.peak, l, number(d.peak));
    add(fams.total, l, number(d.physical_total));
    auto cl = dl;
    cl.push_back({"source", cost_source_label(d.context_source)});
    add(fams.cost, labels(cl), number(d.context_cost));
    add(fams.refusals, l, number(d.refusals));
}

// A process's labels: `process`, its slot and the slot's generation, is what tells it apart from
// every other process of the ledger, past and present (a pid does not: two PID namespaces each have a
// pid 1, and a restarted container's process may take its predecessor's pid and command).
void add_process_labels(LabelList &pl, const Ledger::ProcessView &p, const Labels &with) {
    pl.push_back({"process", std::to_string(p.slot) + "." + std::to_string(p.generation)});
    pl.push_back({"pid", std::to_string(p.pid)});
    if (with.command) pl.push_back({"command", redact_secrets(p.command)});
}

void add_process(Families &fams, const LabelList &base, const Ledger::ProcessView &p,
                 const std::vector<Ledger::DeviceView> &devices, const Labels &with) {
    const char *state = p.alive ? "alive" : p.reclaimed ? "reclaimed" : "dead";
    for (const char *st : {"alive", "dead", "reclaimed"}) {
        auto pl = base;
        add_process_labels(pl, p, with);
        // A stateset's label is the family's name (OpenMetrics).
        pl.push_back({"gpuguard_process_state", st});
        add(fams.pstate, labels(pl), strcmp(st, state) ? "0" : "1");
    }
    for (const auto &d : devices) {
        size_t i = (size_t)d.index;
        if (i >= p.bytes.size() || (!p.bytes[i] && !p.peak[i])) continue;
        auto pl = base;
        pl.push_back({"gpu", std::to_string(d.index)});
        pl.push_back({"UUID", d.uuid});
        add_process_labels(pl, p, with);
        std::string l = labels(pl);
        add(fams.pbytes, l, number(p.bytes[i]));
        add_kinds(fams.pkinds, pl, p.bytes[i], p.kinds[i]);
        add(fams.ppeak, l, number(p.peak[i]));
    }
}

void add_ledger(Families &fams, const LedgerSample &s, const Labels &with) {
    LabelList base;
    if (!with.container.empty()) base.push_back({"container", with.container});
    base.push_back({"ledger", s.path});
    add(fams.up, labels(base), s.up ? "1" : "0");
    if (!s.up) return;
    add(fams.reports, labels(base), number(s.counters.reports_written));
    add(fams.reclaimed, labels(base), number(s.counters.reclaimed_processes));
    for (const auto &d : s.devices) add_device(fams, base, d);
    for (const auto &p : s.processes) add_process(fams, base, p, s.devices, with);
}

std::string exposition(Families &fams, Format f) {
    std::string out;
    for (Family *fam : fams.in_order()) {
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

}  // namespace

std::string render(const std::vector<LedgerSample> &ledgers, const Labels &labels, Format f) {
    Families fams;
    for (const LedgerSample &s : ledgers) add_ledger(fams, s, labels);
    return exposition(fams, f);
}

namespace {

bool names_a_secret(std::string name) {
    for (char &c : name) c = (char)tolower((unsigned char)c);
    for (const char *word : {"token", "password", "passwd", "secret", "key", "auth", "credential"})
        if (name.find(word) != std::string::npos) return true;
    return false;
}

// 24 characters or more of hex or base64 (URL-safe too), letters and digits mixed: a key, not a word
// or a number.
bool looks_like_key(const std::string &w) {
    if (w.size() < 24) return false;
    bool letter = false, digit = false;
    for (char c : w) {
        if (isdigit((unsigned char)c)) digit = true;
        else if (isalpha((unsigned char)c)) letter = true;
        else if (!strchr("+/=_-", c)) return false;
    }
    return letter && digit;
}

// scheme://user:password@host: the password.
std::string redact_url_password(const std::string &w) {
    size_t scheme = w.find("://");
    if (scheme == std::string::npos) return w;
    size_t at = w.find('@', scheme + 3), colon = w.find(':', scheme + 3);
    if (at == std::string::npos || colon == std::string::npos || colon > at) return w;
    return w.substr(0, colon + 1) + "***" + w.substr(at);
}

// One word of a command line; *next_is_secret says the word after it is an option's secret value.
std::string redact_word(const std::string &w, bool *next_is_secret) {
    bool option = w.rfind("-", 0) == 0;
    size_t eq = w.find('=');
    *next_is_secret = option && eq == std::string::npos && names_a_secret(w);
    if (eq != std::string::npos && eq > 0 && names_a_secret(w.substr(0, eq))) return w.substr(0, eq + 1) + "***";
    if (looks_like_key(eq == std::string::npos ? w : w.substr(eq + 1)))
        return eq == std::string::npos ? "***" : w.substr(0, eq + 1) + "***";
    return redact_url_password(w);
}

}  // namespace

std::string redact_secrets(const std::string &command) {
    std::string out, word;
    bool secret_next = false;
    auto flush = [&] {
        if (word.empty()) return;
        bool was_secret = secret_next;
        out += was_secret && word.rfind("-", 0) != 0 ? "***" : redact_word(word, &secret_next);
        if (was_secret && word.rfind("-", 0) != 0) secret_next = false;
        word.clear();
    };
    for (char c : command) {
        if (c == ' ') {
            flush();
            out += ' ';
        } else {
            word += c;
        }
    }
    flush();
    return out;
}

}  // namespace gg::exporter
