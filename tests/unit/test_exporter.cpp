// The exporter's split of usage by kind (tools/exporter/metrics.cpp) on snapshots made up here: the
// race in which a kind's counter is read ahead of the total cannot be timed from a running process.
// And the labels that tell processes apart, on a ledger file that processes join.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "tools/exporter/metrics.h"
#include "tools/exporter/server.h"

using namespace gg;

namespace {

// The value of every sample of `family` whose labels contain `with`, by its kind label.
std::map<std::string, uint64_t> by_kind(const std::string &text, const std::string &family, const std::string &with) {
    std::map<std::string, uint64_t> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(family + "{", 0) != 0 || line.find(with) == std::string::npos) continue;
        size_t k = line.find("kind=\"");
        REQUIRE(k != std::string::npos);
        std::string kind = line.substr(k + 6, line.find('"', k + 6) - (k + 6));
        out[kind] = std::stoull(line.substr(line.rfind(' ') + 1));
    }
    return out;
}

exporter::LedgerSample one_device(uint64_t used, std::array<uint64_t, ledger::kKinds> kinds) {
    exporter::LedgerSample s;
    s.path = "/dev/shm/test.ledger";
    s.up = true;
    ledger::Ledger::DeviceView d{};
    d.index = 0;
    d.uuid = "GPU-00000000-0000-0000-0000-000000000000";
    d.name = "Test GPU";
    d.limit = ledger::kNoLimit;
    d.used = used;
    d.kinds = kinds;
    d.context_cost = 300;
    d.context_source = ledger::kCostOwnProcess;
    s.devices.push_back(d);
    ledger::Ledger::ProcessView p{};
    p.pid = 42;
    p.command = "train";
    p.bytes.assign(ledger::kMaxDevices, 0);
    p.peak.assign(ledger::kMaxDevices, 0);
    p.kinds.assign(ledger::kMaxDevices, {});
    p.bytes[0] = used;
    p.peak[0] = 1000;  // a process is shown while it has a peak there, holding nothing now too
    p.kinds[0] = kinds;
    p.alive = true;
    s.processes.push_back(p);
    return s;
}

}  // namespace

TEST_CASE("exporter: the kinds are the ledger's, allocations the rest, and they sum to the total") {
    auto parts = exporter::split_by_kind(1000, {300, 64, 50});
    CHECK(parts[ledger::kContext] == 300);
    CHECK(parts[ledger::kGraphs] == 64);
    CHECK(parts[ledger::kPools] == 50);
    CHECK(parts[ledger::kKinds] == 586);
}

TEST_CASE("exporter: kinds read ahead of the total are clamped, so that they still sum to it") {
    // A kind is charged to the slot's total first and to its own counter after: a snapshot taken in
    // between has the total without it and the counter with it.
    auto parts = exporter::split_by_kind(350, {300, 64, 50});
    CHECK(parts[ledger::kContext] == 300);
    CHECK(parts[ledger::kGraphs] == 50);
    CHECK(parts[ledger::kPools] == 0);
    CHECK(parts[ledger::kKinds] == 0);
    auto none = exporter::split_by_kind(0, {300, 64, 50});
    CHECK(none[0] + none[1] + none[2] + none[3] == 0);
}

TEST_CASE("exporter: a device's and a process's kind series sum to their used bytes, whatever the snapshot") {
    for (uint64_t used : {1000ull, 350ull, 0ull}) {
        CAPTURE(used);
        std::string text = exporter::render({one_device(used, {300, 64, 50})}, {"c1"}, exporter::Format::kText);
        for (std::string family : {"gpuguard_device_used_by_kind_bytes", "gpuguard_process_used_by_kind_bytes"}) {
            CAPTURE(family);
            auto kinds = by_kind(text, family, "gpu=\"0\"");
            REQUIRE(kinds.size() == 4);
            CHECK(kinds.count("allocations") == 1);
            CHECK(kinds.count("context_and_modules") == 1);
            CHECK(kinds.count("graphs") == 1);
            CHECK(kinds.count("pool_reserve") == 1);
            uint64_t sum = 0;
            for (const auto &[k, v] : kinds) sum += v;
            CHECK(sum == used);
        }
    }
}

TEST_CASE("exporter: a context's cost with its source; 0 and unknown while not measured") {
    auto s = one_device(1000, {300, 0, 0});
    std::string text = exporter::render({s}, {}, exporter::Format::kOpenMetrics);
    CHECK(text.find("# UNIT gpuguard_device_context_cost_bytes bytes\n") != std::string::npos);
    CHECK(text.find("modelName=\"Test GPU\",source=\"own_process\"} 300\n") != std::string::npos);
    s.devices[0].context_cost = 0;
    s.devices[0].context_source = ledger::kCostUnknown;
    text = exporter::render({s}, {}, exporter::Format::kOpenMetrics);
    CHECK(text.find("modelName=\"Test GPU\",source=\"unknown\"} 0\n") != std::string::npos);
}

namespace {

// The label sets of a family's series, the values left out, one entry per series.
std::vector<std::string> label_sets(const std::string &text, const std::string &family) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.rfind(family + "{", 0) == 0) out.push_back(line.substr(0, line.rfind('}') + 1));
    return out;
}

// The value of the `process` label on the first line of `family` whose labels hold `with`.
std::string process_label(const std::string &text, const std::string &family, const std::string &with) {
    for (const std::string &l : label_sets(text, family)) {
        size_t k = l.find("process=\"");
        if (l.find(with) != std::string::npos && k != std::string::npos)
            return l.substr(k + 9, l.find('"', k + 9) - (k + 9));
    }
    return "";
}

// A process that joins the ledger at `path`, charges a byte on its device and exits without leaving,
// as a killed process does: its slot stays, dead, until reclaimed.
void join_and_die(const std::string &path, int dev) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        ledger::OpenOptions o;
        o.path = path;
        std::string error, notice;
        ledger::Ledger *l = ledger::Ledger::open(o, &error, &notice);
        uint64_t used = 0;
        char ok = l && l->try_charge(dev, 1, &used) ? 'y' : 'n';
        (void)!write(fds[1], &ok, 1);
        _exit(0);
    }
    char ok = 0;
    REQUIRE(read(fds[0], &ok, 1) == 1);
    REQUIRE(ok == 'y');
    waitpid(pid, nullptr, 0);
    close(fds[0]);
    close(fds[1]);
}

}  // namespace

TEST_CASE(
    "exporter: processes with one pid (two PID namespaces' pid 1) get label sets of their own, and a reused "
    "slot a new one") {
    char path[64];
    snprintf(path, sizeof path, "/tmp/gpuguard-exporter-test-%d", (int)getpid());
    unlink(path);
    ledger::OpenOptions o;
    o.path = path;
    std::string error, notice;
    std::unique_ptr<ledger::Ledger> l(ledger::Ledger::open(o, &error, &notice));
    REQUIRE(l);
    const uint8_t uuid[16] = {9};
    int dev = l->device_index(uuid, ledger::kNoLimit, 1 << 30, "Test GPU");
    uint64_t used = 0;
    REQUIRE(l->try_charge(dev, 1, &used));  // this process: slot 0
    join_and_die(path, dev);                // slot 1, dead
    // Both say the pid and command of this process, as two containers' pid 1 running one image do.
    ledger::Slot &other = l->header()->slots[1];
    other.pid.store(getpid());
    std::string text = exporter::render({exporter::sample(path)}, {"c1", true}, exporter::Format::kText);
    auto sets = label_sets(text, "gpuguard_process_state");
    REQUIRE(sets.size() == 6);  // two processes, three states each
    for (size_t i = 0; i < sets.size(); i++)
        for (size_t j = i + 1; j < sets.size(); j++) CHECK(sets[i] != sets[j]);
    auto used_sets = label_sets(text, "gpuguard_process_used_bytes");
    REQUIRE(used_sets.size() == 2);
    CHECK(used_sets[0] != used_sets[1]);
    std::string before = process_label(text, "gpuguard_process_state", "process=\"1.");
    CHECK(before == "1.1");

    // The dead process's slot is reclaimed and taken by a restarted one with the same pid and command.
    CHECK(l->reclaim_dead(false) == 1);
    join_and_die(path, dev);
    other.pid.store(getpid());
    text = exporter::render({exporter::sample(path)}, {"c1", true}, exporter::Format::kText);
    std::string after = process_label(text, "gpuguard_process_state", "process=\"1.");
    CHECK(after == "1.2");
    CHECK(process_label(text, "gpuguard_process_state", "process=\"0.") == "0.1");  // this one's stays
    l.reset();
    unlink(path);
}

TEST_CASE("exporter: no command label unless asked, and what looks like a secret redacted when asked") {
    auto s = one_device(1000, {0, 0, 0});
    s.processes[0].command = "python3 train.py --token=hunter2";
    std::string text = exporter::render({s}, {"c1"}, exporter::Format::kText);
    CHECK(text.find("command=") == std::string::npos);
    CHECK(text.find("hunter2") == std::string::npos);
    text = exporter::render({s}, {"c1", true}, exporter::Format::kText);
    CHECK(text.find("command=\"python3 train.py --token=***\"") != std::string::npos);
    CHECK(text.find("hunter2") == std::string::npos);
}

TEST_CASE("exporter: secrets in a command line are redacted, the rest kept") {
    const std::pair<const char *, const char *> cases[] = {
        {"train.py --token=abc --lr 0.1", "train.py --token=*** --lr 0.1"},
        {"train.py --password abc --epochs 3", "train.py --password *** --epochs 3"},
        {"train.py --api-key abc", "train.py --api-key ***"},
        {"env API_KEY=abc HF_TOKEN=def python3 t.py", "env API_KEY=*** HF_TOKEN=*** python3 t.py"},
        {"push https://bob:s3cret@example.com/repo", "push https://bob:***@example.com/repo"},
        {"run d41d8cd98f00b204e9800998ecf8427e", "run ***"},
        {"run --sig=ghp_16C7e42F292c6912E7710c838347Ae178B4a", "run --sig=***"},
        {"train.py --data /data/imagenet --batch-size 256 --keep-checkpoints",
         "train.py --data /data/imagenet --batch-size 256 --keep-checkpoints"},
        {"train.py --password --next", "train.py --password --next"},
        {"python3 -m torch.distributed.run --nproc_per_node 8", "python3 -m torch.distributed.run --nproc_per_node 8"},
    };
    for (const auto &[in, want] : cases) {
        CAPTURE(in);
        CHECK(exporter::redact_secrets(in) == want);
    }
}

// Review of the poll() server: ppoll() lets SIGTERM in only when it would sleep, so while a descriptor
// is ready at every round (a flood of connections) the handler never ran and the exporter never
// stopped. A pipe with data waiting stands in for the flood: as the "listening" descriptor it is
// readable at every round (accept4 fails on it, and it stays readable).
TEST_CASE("exporter server: SIGTERM stops it while a descriptor is ready at every round") {
    int p[2];
    REQUIRE(pipe(p) == 0);
    REQUIRE(write(p[1], "x", 1) == 1);
    // Ready once the child said so (its handler is installed then): SIGUSR1 blocked before the fork (a
    // child quicker than this would otherwise end the test with it) and waited for.
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, &old);
    pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        gg::exporter::serve(
            p[0], gg::exporter::ServerLimits(), [](const std::string &) { return gg::exporter::Response(); },
            [] { kill(getppid(), SIGUSR1); });
        _exit(0);
    }
    int sig = 0;
    timespec ready_wait{10, 0};
    sig = sigtimedwait(&usr1, nullptr, &ready_wait);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    REQUIRE(sig == SIGUSR1);
    kill(child, SIGTERM);
    // A generous watchdog tells "stopped" from "never stops" (not a measure of speed).
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 1000 && (done = waitpid(child, &status, WNOHANG)) == 0; i++) usleep(10000);
    bool stopped = done == child;
    if (!stopped) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
    }
    CHECK_MESSAGE(stopped, "the server ignored SIGTERM while a descriptor was always ready");
    CHECK((stopped && WIFEXITED(status) && WEXITSTATUS(status) == 0));
    close(p[0]);
    close(p[1]);
}
