#include "shim/report/report.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/base/log.h"
#include "common/base/version.h"
#include "common/report/environment.h"
#include "common/report/limits.h"
#include "common/report/schema.h"
#include "shim/base/race_once.h"
#include "shim/core/state.h"
#include "shim/device/device.h"
#include "shim/python/frames.h"
#include "shim/report/json_out.h"
#include "shim/report/phase.h"
#include "shim/resolve/real.h"
#include "shim/track/tracker.h"

namespace gg::report {

namespace key = schema::key;
namespace value = schema::value;
namespace {

using nlohmann::json;

std::atomic<int> g_automatic_written{0};
std::atomic<int> g_sequence{0};
std::atomic<int> g_episode{0};
std::atomic<int> g_episode_calls{0};
std::atomic<uint64_t> g_episode_first_ns{0};
std::mutex g_sections_mu;
// Never destroyed (shim/base/race_once.h): a report may be written while exit() runs static destructors.
std::atomic<std::vector<SectionFn> *> g_sections_made{nullptr};
std::vector<SectionFn> &sections_list() { return never_destroyed(g_sections_made); }
std::atomic<std::vector<StreamedSectionFn> *> g_streamed_made{nullptr};
std::vector<StreamedSectionFn> &streamed_list() { return never_destroyed(g_streamed_made); }

std::string read_small_file(const char *path) {
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0 && out.size() < (1 << 20)) out.append(buf, (size_t)n);
    close(fd);
    return out;
}

json process_section() {
    json p;
    p[key::pid] = getpid();
    p[key::ppid] = getppid();
    p[key::uid] = getuid();
    json cmd = json::array();
    std::string raw = read_small_file("/proc/self/cmdline");
    for (size_t i = 0; i < raw.size();) {
        size_t end = raw.find('\0', i);
        if (end == std::string::npos) end = raw.size();
        cmd.push_back(raw.substr(i, end - i));
        i = end + 1;
    }
    p[key::command] = cmd;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    p[key::exe] = n > 0 ? std::string(exe, (size_t)n) : "";
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    p[key::hostname] = host;
    p[key::start_unix_ns] = state().start_unix_ns;
    json env = json::object();
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        // Exact names, values of secret-looking ones hidden (common/report/environment.h); never the
        // whole environment.
        std::string name(*e, (size_t)(eq - *e)), value;
        if (report_env::carried(name, eq + 1, &value)) env[name] = value;
    }
    p[key::env] = env;
    return p;
}

json device_section(int ordinal) {
    json d;
    const DeviceInfo *dev = device_info(ordinal);
    d[key::ordinal] = ordinal;
    d[key::uuid] = dev ? dev->uuid : "";
    d[key::name] = dev ? dev->name : "";
    d[key::total_bytes] = dev ? (int64_t)dev->physical_total : -1;
    // One cheap query through the real table (never the hooks); it needs the caller's context.
    size_t free_b = 0, total_b = 0;
    const RealDriver &r = real_driver();
    bool ok = r.cuMemGetInfo_v2 && current_ordinal() == ordinal && r.cuMemGetInfo_v2(&free_b, &total_b) == CUDA_SUCCESS;
    d[key::free_bytes] = ok ? (int64_t)free_b : -1;
    return d;
}

std::string stack_key(stacks::StackId id) { return "s" + std::to_string(id); }
json stack_ref(stacks::StackId id) { return id ? json(stack_key(id)) : json(nullptr); }
// A stack as the report's "stacks" lists it.
json stack_entry(stacks::StackId id) { return {{key::frames, stacks::frames_json(id)}}; }

json by_stack_json(const std::vector<StackBytes> &v, std::set<stacks::StackId> &used, size_t max) {
    json out = json::array();
    for (size_t i = 0; i < v.size() && i < max; i++) {
        out.push_back({{key::stack, stack_ref(v[i].stack)}, {key::bytes, v[i].bytes}, {key::count, v[i].count}});
        if (v[i].stack) used.insert(v[i].stack);
    }
    return out;
}

std::string hex(uint64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)v);
    return buf;
}

// Writes what `fill` writes into `fd` (it returns "" or why it failed) as the file dir/name: into a
// temporary file renamed over the name once whole, so that the reader never sees a report cut short
// (a full disk, a report past the cap); the temporary file is removed when anything failed.
bool write_atomically(const std::string &dir, const std::string &name, const std::function<std::string(int fd)> &fill,
                      std::string *path) {
    *path = dir + "/" + name;
    // O_EXCL | O_NOFOLLOW: never through a file or link someone planted at the temporary name (a
    // report folder may be shared); such a name is skipped for another, with a random part.
    std::string tmp = dir + "/." + name + ".tmp";
    int fd = -1;
    for (int attempt = 0; attempt < 8; attempt++) {
        fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
        if (fd >= 0 || errno != EEXIST) break;
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) r = mono_ns() * 0x9E3779B97F4A7C15ull;
        char suffix[24];
        snprintf(suffix, sizeof suffix, ".%016llx", (unsigned long long)r);
        tmp = dir + "/." + name + suffix + ".tmp";
    }
    if (fd < 0) {
        log_error("cannot write a report in GPUGUARD_REPORT_DIR=%s: %s", dir.c_str(), strerror(errno));
        return false;
    }
    std::string why = fill(fd);
    if (close(fd) != 0 && why.empty()) why = strerror(errno);
    if (why.empty() && rename(tmp.c_str(), path->c_str()) != 0) why = strerror(errno);
    if (!why.empty()) {
        log_error("cannot write report %s: %s", path->c_str(), why.c_str());
        unlink(tmp.c_str());
    }
    return why.empty();
}

}  // namespace

const char *reason_name(Reason r) {
    switch (r) {
        case Reason::kQuota: return "quota";
        case Reason::kDriverOom: return "driver_oom";
        case Reason::kExit: return "exit";
        case Reason::kRequest: return "request";
        case Reason::kSignal: return "signal";
        case Reason::kWarnAt: return "warn_at";
        case Reason::kAllocatorOom: return "allocator_oom";
    }
    return "unknown";
}

// {"allocations", "context_and_modules", "graphs", "pool_reserve"} of a total: the kinds as the
// ledger holds them (common/ledger/layout.h), the allocations the rest.
json kinds_json(uint64_t total, const uint64_t *kinds) {
    uint64_t others = kinds[ledger::kContext] + kinds[ledger::kGraphs] + kinds[ledger::kPools];
    return {{key::allocations, total > others ? total - others : 0},
            {key::context_and_modules, kinds[ledger::kContext]},
            {key::graphs, kinds[ledger::kGraphs]},
            {key::pool_reserve, kinds[ledger::kPools]}};
}

int ordinal_of(const json &r) {
    const json *d = r.contains(key::device) && r[key::device].is_object() ? &r[key::device] : nullptr;
    return d ? d->value(key::ordinal, -1) : -1;
}

void add_section(SectionFn fn) {
    std::lock_guard<std::mutex> lock(g_sections_mu);
    sections_list().push_back(fn);
}

void add_streamed_section(StreamedSectionFn fn) {
    std::lock_guard<std::mutex> lock(g_sections_mu);
    streamed_list().push_back(fn);
}

json SectionWriter::stack(stacks::StackId id) {
    if (id) used_->insert(id);
    return stack_ref(id);
}

json referenced_stack(json &report, stacks::StackId id) {
    if (!id) return nullptr;
    if (!report.contains(key::stacks) || !report[key::stacks].is_object()) report[key::stacks] = json::object();
    std::string k = stack_key(id);
    if (!report[key::stacks].contains(k)) report[key::stacks][k] = stack_entry(id);
    return k;
}

void begin_episode(int id, uint64_t first_unix_ns) {
    g_episode.store(id);
    g_episode_calls.store(1);
    g_episode_first_ns.store(first_unix_ns);
}

void note_failed_call() { g_episode_calls.fetch_add(1); }

void lock_for_fork() { g_sections_mu.lock(); }
void unlock_after_fork() { g_sections_mu.unlock(); }
void reset_after_fork() {
    g_automatic_written.store(0);
    g_sequence.store(0);
    g_episode.store(0);
    g_episode_calls.store(0);
    g_episode_first_ns.store(0);
}

namespace {

// A caller's message, cut at kMaxMessageBytes (on a character's first byte) with a marker of what
// was left out: a message of any size still makes a report the reader accepts.
std::string bounded_message(const std::string &message) {
    if (message.size() <= report_limits::kMaxMessageBytes) return message;
    size_t cut = report_limits::kMaxMessageBytes;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) cut--;
    return message.substr(0, cut) + "... [" + std::to_string(message.size() - cut) + " more bytes not written]";
}

json capture_section(const Config &c) {
    stacks::ReuseCounts reuse = stacks::reuse_counts();
    stacks::WalkerCounts walker = stacks::walker_counts();
    return {{key::unwinder, stacks::unwinder()},
            {key::walker,
             {{key::walks, walker.walks},
              {key::rules_learned, walker.rules_learned},
              {key::fallbacks, walker.fallbacks},
              {key::recalled, walker.recalled},
              {key::trusted, walker.trusted}}},
            {key::python, py::version()},
            {key::stack_depth, c.stack_depth},
            {key::stack_reuse,
             {{key::on, c.stack_reuse},
              {key::reused, reuse.reused},
              {key::unwound, reuse.unwound},
              {key::checks, reuse.checks},
              {key::changes, reuse.changes},
              {key::unstable_sites, reuse.unstable_sites},
              {key::evicted, reuse.evicted},
              {key::threads, reuse.threads},
              {key::deep_checks, reuse.deep_checks},
              {key::deep_sites, reuse.deep_sites},
              {key::whole_keys, reuse.whole_keys}}}};
}

json limit_section(const State &s, const DeviceInfo *dev) {
    if (!dev || !has_limit(*dev)) return nullptr;
    const Config &c = *s.cfg;
    return {{key::bytes, dev->limit},
            {key::spec, s.ledger->limit_spec()},
            {key::source, c.limit_source.empty() ? "ledger" : c.limit_source},
            {key::scope, s.ledger->shared() ? "container" : "process"}};
}

json usage_section(const State &s, int ldev, const Tracker::Snapshot &snap) {
    return {{key::process_bytes, ldev >= 0 ? s.ledger->own_bytes(ldev) : snap.live_bytes},
            {key::process_peak_bytes, ldev >= 0 ? s.ledger->own_peak(ldev) : snap.peak_bytes},
            {key::container_bytes, ldev >= 0 ? s.ledger->container_used(ldev) : snap.live_bytes},
            {key::live_allocations, snap.live_count}};
}

json failed_request_section(const Failure *failure, std::set<stacks::StackId> &used) {
    if (!failure) return nullptr;
    if (failure->stack) used.insert(failure->stack);
    return {{key::api, api_name(failure->api)},     {key::driver_api, api_name(failure->driver_api)},
            {key::bytes, failure->bytes},           {key::device, failure->ordinal},
            {key::thread, failure->thread},         {key::driver_result, failure->result},
            {key::stack, stack_ref(failure->stack)}};
}

json episode_section(const Failure *failure) {
    // A failure's report is about its own episode, even if a later one began while it was written.
    int episode = failure ? failure->episode : g_episode.load();
    if (!episode) return nullptr;
    return {{key::id, episode},
            {key::failed_calls, episode == g_episode.load() ? g_episode_calls.load() : 1},
            {key::first_unix_ns, failure ? failure->first_unix_ns : g_episode_first_ns.load()}};
}

json counts_section(const Tracker::Snapshot &snap) {
    json counts = json::object();
    for (const auto &[api, n] : snap.counts)
        counts[api_name(api)] = {{key::allocs, n.allocs},
                                 {key::frees, n.frees},
                                 {key::failures, n.failures},
                                 {key::live_bytes, n.live_bytes},
                                 {key::live_count, n.live_count}};
    return counts;
}

json top_allocations_section(const Tracker::Snapshot &snap, std::set<stacks::StackId> &used) {
    uint64_t now_mono = mono_ns();
    json top = json::array();
    for (const auto &[key, a] : snap.top) {
        top.push_back({{key::address, hex(key)},
                       {key::bytes, a.bytes},
                       {key::api, api_name(a.api)},
                       {key::device, a.ordinal},
                       {key::age_ns, now_mono - a.t_ns},
                       {key::thread, a.thread},
                       {key::stack, stack_ref(a.stack)},
                       {key::tag, a.workspace ? json(value::kCudnnWorkspace) : json(nullptr)}});
        if (a.stack) used.insert(a.stack);
    }
    return top;
}

json timeline_section(const State &s, const Tracker::Snapshot &snap) {
    namespace col = schema::point_row;
    json points = json::array();
    for (const auto &[t, b] : snap.timeline) {
        json row = json(json::array_t(col::kColumns));
        row[col::t_ns] = t - s.start_mono_ns;
        row[col::bytes] = b;
        points.push_back(std::move(row));
    }
    return {{key::t0_unix_ns, s.start_unix_ns}, {key::points, points}};
}

json stacks_section(const std::set<stacks::StackId> &used) {
    json stacks_json = json::object();
    for (stacks::StackId id : used) stacks_json[stack_key(id)] = stack_entry(id);
    return stacks_json;
}

json ledger_section(const State &s, int ldev) {
    json devices = json::array(), procs = json::array();
    for (const auto &d : s.ledger->devices())
        devices.push_back({{key::uuid, d.uuid},
                           {key::limit_bytes, d.limit == UINT64_MAX ? json(nullptr) : json(d.limit)},
                           {key::used_bytes, d.used},
                           {key::peak_bytes, d.peak},
                           {key::by_kind, kinds_json(d.used, d.kinds.data())}});
    for (const auto &p : s.ledger->processes()) {
        uint64_t bytes = ldev >= 0 ? p.bytes[(size_t)ldev] : 0, peak = ldev >= 0 ? p.peak[(size_t)ldev] : 0;
        procs.push_back({{key::pid, p.pid},
                         {key::command, p.command},
                         {key::bytes, bytes},
                         {key::peak_bytes, peak},
                         {key::by_kind, ldev >= 0 ? kinds_json(bytes, p.kinds[(size_t)ldev].data()) : json(nullptr)},
                         {key::alive, p.alive},
                         {key::self, p.self}});
    }
    return {{key::path, s.ledger->path()}, {key::devices, devices}, {key::processes, procs}};
}

void add_registered_sections(json &r) {
    std::vector<SectionFn> sections;
    {
        std::lock_guard<std::mutex> lock(g_sections_mu);
        sections = sections_list();
    }
    for (SectionFn fn : sections) fn(r);
}

// The report's sections that are small enough to make whole (bounded lists), with the registered
// sections that add to them.
json whole_sections(Reason reason, const std::string &message, const Failure *failure, int ordinal) {
    State &s = state();
    const Config &c = *s.cfg;
    Tracker::Snapshot snap = tracker().snapshot((size_t)c.top_n);
    std::set<stacks::StackId> used;

    json r;
    r[key::schema] = schema::kName;
    r[key::version] = schema::kVersion;
    r[key::reason] = reason_name(reason);
    r[key::message] = bounded_message(message);
    if (std::string p = phase::current(); !p.empty()) r[key::phase] = p;
    r[key::time_unix_ns] = unix_ns();
    r[key::gpuguard_version] = GPUGUARD_VERSION_STRING;
    r[key::process] = process_section();
    r[key::capture] = capture_section(c);
    r[key::device] = device_section(ordinal);
    const DeviceInfo *dev = device_info(ordinal);
    r[key::limit] = limit_section(s, dev);
    int ldev = dev ? dev->ledger_index : -1;
    r[key::usage] = usage_section(s, ldev, snap);
    r[key::failed_request] = failed_request_section(failure, used);
    r[key::episode] = episode_section(failure);
    r[key::counts_by_api] = counts_section(snap);
    r[key::top_allocations] = top_allocations_section(snap, used);
    constexpr size_t kMaxStacksListed = 500;
    r[key::by_stack] = by_stack_json(snap.by_stack, used, kMaxStacksListed);
    r[key::peak] = {{key::bytes, snap.peak_bytes},
                    {key::time_unix_ns, snap.peak_t_ns ? s.start_unix_ns + (snap.peak_t_ns - s.start_mono_ns) : 0},
                    {key::by_stack, by_stack_json(snap.peak_by_stack, used, kMaxStacksListed)}};
    r[key::timeline] = timeline_section(s, snap);
    r[key::stacks] = stacks_section(used);
    if (s.ledger->shared()) r[key::ledger] = ledger_section(s, ldev);
    add_registered_sections(r);
    return r;
}

// The report into `out`: the sections made whole, then the streamed ones, then the stacks that any
// of them refers to. A JSON object's members have no order: the reader takes them by name.
void write_report(JsonOut &out, Reason reason, const std::string &message, const Failure *failure, int ordinal) {
    json whole = whole_sections(reason, message, failure, ordinal);
    json listed_stacks = std::move(whole[key::stacks]);
    whole.erase(key::stacks);
    out.begin_object();
    for (auto &[k, v] : whole.items()) out.value(k.c_str(), v);
    std::set<stacks::StackId> streamed_stacks;
    SectionWriter section(out, ordinal_of(whole), &streamed_stacks);
    whole = json();  // written: only the streamed sections' rows are held from here
    std::vector<StreamedSectionFn> streamed;
    {
        std::lock_guard<std::mutex> lock(g_sections_mu);
        streamed = streamed_list();
    }
    for (StreamedSectionFn fn : streamed) fn(section);
    out.begin_object(key::stacks);
    for (auto &[k, v] : listed_stacks.items()) out.value(k.c_str(), v);
    for (stacks::StackId id : streamed_stacks)
        if (!listed_stacks.contains(stack_key(id))) out.value(stack_key(id).c_str(), stack_entry(id));
    out.end_object();
    out.end_object();
}

// Writes the report into `fd`: "" or why it was not written whole.
std::string write_into(int fd, Reason reason, const std::string &message, const Failure *failure, int ordinal) {
    // No exception leaves the shim: an out-of-memory while the report is written (host memory may be
    // what ran out) costs the report, with its line, not the program.
    try {
        JsonOut out(fd);
        write_report(out, reason, message, failure, ordinal);
        return out.finish() ? "" : out.why();
    } catch (const std::exception &e) {
        return std::string("cannot assemble it: ") + e.what();
    }
}

}  // namespace

json build(Reason reason, const std::string &message, const Failure *failure, int ordinal) {
    std::string text;
    JsonOut out(&text);
    write_report(out, reason, message, failure, ordinal);
    return out.finish() ? json::parse(text) : json();
}

std::string write(Reason reason, const std::string &message, const Failure *failure, int ordinal) {
    const Config &c = *state().cfg;
    bool automatic = reason == Reason::kQuota || reason == Reason::kDriverOom || reason == Reason::kWarnAt ||
                     reason == Reason::kAllocatorOom;
    if (automatic && g_automatic_written.fetch_add(1) >= c.max_reports) {
        if (g_automatic_written.load() == c.max_reports + 1)
            log_error("GPUGUARD_MAX_REPORTS=%d reached; no more reports from this process", c.max_reports);
        return "";
    }
    char host[64] = {};
    gethostname(host, sizeof host - 1);
    for (char *p = host; *p; p++)
        if (*p == '/' || *p == '.') *p = '-';
    char name[256];
    snprintf(name, sizeof name, "gpuguard-%s-%llu-%s-%d-%d.json", reason_name(reason),
             (unsigned long long)(unix_ns() / 1000000000ull), host, (int)getpid(), g_sequence.fetch_add(1) + 1);
    std::string path;
    auto fill = [&](int fd) { return write_into(fd, reason, message, failure, ordinal); };
    if (!write_atomically(c.report_dir, name, fill, &path)) return "";
    if (state().ledger) state().ledger->count_report();
    return path;
}

bool rewrite(const std::string &path, Reason reason, const std::string &message, const Failure *failure, int ordinal) {
    size_t slash = path.rfind('/');
    if (slash == std::string::npos) return false;
    std::string written;
    auto fill = [&](int fd) { return write_into(fd, reason, message, failure, ordinal); };
    return write_atomically(path.substr(0, slash), path.substr(slash + 1), fill, &written);
}

}  // namespace gg::report
