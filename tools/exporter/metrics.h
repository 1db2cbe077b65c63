// The metrics `gpuguard exporter` serves, made from ledger snapshots alone (no driver call): per device
// the limit, usage (and its split by kind), peak, physical total, a context's measured cost and
// refusals; per process its bytes (and their split by kind), peak and state; the ledger's reports
// written and dead processes reclaimed. Names and labels follow Prometheus's
// conventions (base units, _bytes, _total) and DCGM's labels (gpu, UUID, modelName), plus container.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/ledger/ledger.h"

namespace gg::exporter {

// One ledger as one scrape saw it.
struct LedgerSample {
    std::string path;
    bool up = false;  // false: no ledger there yet, or not readable (then nothing below)
    std::string limit_spec;
    std::vector<ledger::Ledger::DeviceView> devices;
    std::vector<ledger::Ledger::ProcessView> processes;
    ledger::Ledger::Counters counters{};
};

// Opens the ledger read-only, takes its views and closes it.
LedgerSample sample(const std::string &path);

enum class Format {
    kText,         // Prometheus's text format 0.0.4 (what `promtool check metrics` reads)
    kOpenMetrics,  // OpenMetrics 1.0.0 (what a Prometheus server asks for first)
};
const char *content_type(Format f);

// What a scrape shows besides the numbers.
struct Labels {
    std::string container;  // the container label ("" leaves it out)
    bool command = false;   // a process's command line, its secrets redacted (--command-label)
};

// The exposition of every ledger.
std::string render(const std::vector<LedgerSample> &ledgers, const Labels &labels, Format f);

// A command line with what looks like a secret replaced by "***": the value of an option or
// variable whose name says token, password, passwd, secret, key, auth or credential
// (--token=V, --password V, API_KEY=V), a URL's password (https://user:V@host), and a long run of
// hex or base64 (24 characters or more, letters and digits mixed). A guess that cannot know every
// secret's shape, which is why the exporter leaves the command out unless asked.
std::string redact_secrets(const std::string &command);

// A total split by kind as the exporter shows it: context_and_modules, graphs, pool_reserve (Kind's
// order), then the allocations, summing to `total` exactly. The ledger's counters are read one by one
// while processes move them (charging a kind adds to the slot's total before the kind's counter;
// kinds.cpp), so a snapshot can hold a kind ahead of the total; each kind is clamped to what the kinds
// before it left, and the allocations are the rest, so that the series of a kind family always add
// up to the used figure scraped with them.
std::array<uint64_t, ledger::kKinds + 1> split_by_kind(uint64_t total,
                                                       const std::array<uint64_t, ledger::kKinds> &kinds);

// A label value escaped as both formats want it (backslash, double quote, newline), invalid UTF-8
// replaced.
std::string escape_label(const std::string &value);

}  // namespace gg::exporter
