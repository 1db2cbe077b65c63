#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/ledger/ledger.h"

using namespace gg::ledger;

namespace {

std::string temp_path(const char *tag) {
    char buf[128];
    snprintf(buf, sizeof buf, "/tmp/gpuguard-ledger-test-%s-%d", tag, (int)getpid());
    unlink(buf);
    return buf;
}

Ledger *open_ledger(const std::string &path, const std::string &spec, std::string *notice = nullptr) {
    OpenOptions o;
    o.path = path;
    o.limit_spec = spec;
    std::string error, n;
    Ledger *l = Ledger::open(o, &error, &n);
    INFO(error);
    REQUIRE(l != nullptr);
    if (notice) *notice = n;
    return l;
}

const uint8_t kUuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

}  // namespace

TEST_CASE("ledger: created with mode 0600, magic and version; the limit written by its creator") {
    std::string path = temp_path("create");
    Ledger *l = open_ledger(path, "2GiB");
    struct stat st;
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(memcmp(l->header()->magic, "GPUGLEDG", 8) == 0);
    CHECK(l->header()->layout_version == kLayoutVersion);
    CHECK(l->limit_spec() == "2GiB");
    delete l;
    unlink(path.c_str());
}

TEST_CASE("ledger: admission never passes the limit and releases are clamped") {
    std::string path = temp_path("admit");
    Ledger *l = open_ledger(path, "1000");
    int d = l->device_index(kUuid, 1000, 5000, "gpu");
    REQUIRE(d == 0);
    CHECK(l->device_index(kUuid, 1, 1, "again") == 0);  // the same UUID is the same device
    uint64_t used = 0;
    CHECK(l->try_charge(d, 600, &used));
    CHECK(used == 600);
    CHECK_FALSE(l->try_charge(d, 401, &used));
    CHECK(l->container_used(d) == 600);
    CHECK(l->try_charge(d, 400, &used));
    CHECK(l->release(d, 5000) == 1000);  // more than held: clamped, never negative
    CHECK(l->container_used(d) == 0);
    CHECK(l->own_peak(d) == 1000);
    delete l;
    unlink(path.c_str());
}

// Issue 20: the counters `gpuguard exporter` reads live in a struct of their own after the slots
// (layout 2), not in words other layouts reserve; a read-only view never adds to them.
TEST_CASE("ledger: refusals per device and reports written are counted for the exporter") {
    std::string path = temp_path("counters");
    Ledger *l = open_ledger(path, "1000");
    int d = l->device_index(kUuid, 1000, 5000, "gpu");
    REQUIRE(d == 0);
    l->count_refusal(d);
    l->count_refusal(d);
    l->count_refusal(-1);  // out of range: ignored
    l->count_report();
    CHECK(l->devices().at(0).refusals == 2);
    CHECK(l->counters().reports_written == 1);
    CHECK(l->header()->reserved2 == 0);
    CHECK(l->header()->devices[0].reserved == 0);
    OpenOptions o;
    o.path = path;
    o.read_only = true;
    std::string error, notice;
    Ledger *ro = Ledger::open(o, &error, &notice);
    REQUIRE(ro != nullptr);
    ro->count_refusal(d);
    ro->count_report();
    CHECK(ro->devices().at(0).refusals == 2);
    CHECK(ro->counters().reports_written == 1);
    delete ro;
    delete l;
    unlink(path.c_str());
}

TEST_CASE("ledger: a second process's different limit is reported and the ledger's limit stands") {
    std::string path = temp_path("stands");
    Ledger *first = open_ledger(path, "1GiB");
    REQUIRE(first->join());
    // Another process (a child) opens the same file asking for another limit.
    pid_t pid = fork();
    if (pid == 0) {
        OpenOptions o;
        o.path = path;
        o.limit_spec = "2GiB";
        std::string error, notice;
        Ledger *l = Ledger::open(o, &error, &notice);
        bool ok = l && l->limit_spec() == "1GiB" && notice.find("which stands") != std::string::npos;
        _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    delete first;
    unlink(path.c_str());
}

TEST_CASE("ledger: an idle ledger left by an earlier run takes the new process's limit") {
    std::string path = temp_path("idle");
    delete open_ledger(path, "1GiB");  // no live process joined
    std::string notice;
    Ledger *l = open_ledger(path, "3GiB", &notice);
    CHECK(l->limit_spec() == "3GiB");
    CHECK(notice.empty());
    delete l;
    unlink(path.c_str());
}

TEST_CASE("ledger: foreign, truncated, other-version and symlinked files are refused and left untouched") {
    std::string path = temp_path("bad");
    auto refused = [&](const std::string &needle) {
        OpenOptions o;
        o.path = path;
        std::string error, notice;
        Ledger *l = Ledger::open(o, &error, &notice);
        CHECK(l == nullptr);
        CHECK_MESSAGE(error.find(needle) != std::string::npos, error);
        CHECK_MESSAGE(error.find(path) != std::string::npos, error);
        delete l;
    };
    FILE *f = fopen(path.c_str(), "w");
    fputs("hello, this is not a ledger at all, but it is long enough to have a magic", f);
    fclose(f);
    refused("not a gpuguard ledger");
    struct stat st;
    stat(path.c_str(), &st);
    CHECK(st.st_size == 73);  // untouched

    delete open_ledger(temp_path("good"), "");
    std::string good = temp_path("good");
    delete open_ledger(good, "");
    // Truncated copy of a good ledger.
    {
        int in = open(good.c_str(), O_RDONLY);
        std::vector<char> buf(4096);
        ssize_t n = read(in, buf.data(), buf.size());
        close(in);
        int out = open(path.c_str(), O_WRONLY | O_TRUNC);
        CHECK(write(out, buf.data(), (size_t)n) == n);
        close(out);
    }
    refused("truncated");
    // Another layout version.
    {
        int fd = open(good.c_str(), O_RDWR);
        uint32_t v = 99;
        CHECK(pwrite(fd, &v, sizeof v, 8) == (ssize_t)sizeof v);
        close(fd);
        unlink(path.c_str());
        CHECK(link(good.c_str(), path.c_str()) == 0);
    }
    refused("layout version 99");
    unlink(path.c_str());
    CHECK(symlink(good.c_str(), path.c_str()) == 0);
    refused("symbolic link");
    unlink(path.c_str());
    unlink(good.c_str());
}

TEST_CASE("ledger: a dead process's slot is reclaimed, and a reused pid is not mistaken for it") {
    std::string path = temp_path("reclaim");
    Ledger *l = open_ledger(path, "1000");
    int d = l->device_index(kUuid, 1000, 5000, "gpu");
    // A child charges 700 bytes and is SIGKILLed.
    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        Ledger *c = open_ledger(path, "1000");
        uint64_t used;
        bool ok = c->try_charge(d, 700, &used);
        char b = ok ? 'y' : 'n';
        (void)!write(pipefd[1], &b, 1);
        pause();
        _exit(0);
    }
    char b = 0;
    REQUIRE(read(pipefd[0], &b, 1) == 1);
    REQUIRE(b == 'y');
    CHECK(l->container_used(d) == 700);
    uint64_t used = 0;
    CHECK_FALSE(l->try_charge(d, 400, &used));
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    CHECK(l->reclaim_dead(false) == 1);
    CHECK(l->container_used(d) == 0);
    CHECK(l->try_charge(d, 1000, &used));
    l->release(d, 1000);

    // A slot whose pid is alive (ours) but whose start time differs: the pid was reused.
    Slot &fake = l->header()->slots[kMaxSlots - 1];
    fake.pid.store(getppid());
    fake.start_ticks.store(12345);  // not the parent's real start time
    fake.bytes[d].store(300);
    fake.state.store(kSlotLive);
    l->header()->slot_high.store(kMaxSlots);
    CHECK(l->container_used(d) == 300);
    CHECK(l->reclaim_dead(false) == 1);
    CHECK(l->container_used(d) == 0);
    close(pipefd[0]);
    close(pipefd[1]);
    delete l;
    unlink(path.c_str());
}

TEST_CASE("ledger: 8 processes of 8 threads never hold more than the limit together") {
    std::string path = temp_path("stress");
    const uint64_t limit = 1 << 20;
    Ledger *l = open_ledger(path, std::to_string(limit));
    int d = l->device_index(kUuid, limit, limit * 4, "gpu");
    // Ground truth outside the ledger: bytes admitted right now, and the most ever, across processes.
    auto *truth = static_cast<std::atomic<uint64_t> *>(
        mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    new (&truth[0]) std::atomic<uint64_t>(0);
    new (&truth[1]) std::atomic<uint64_t>(0);
    std::vector<pid_t> kids;
    for (int p = 0; p < 8; p++) {
        pid_t pid = fork();
        if (pid == 0) {
            Ledger *c = open_ledger(path, std::to_string(limit));
            std::vector<std::thread> threads;
            for (int t = 0; t < 8; t++)
                threads.emplace_back([&, t] {
                    std::mt19937_64 rng(p * 100 + t);
                    std::vector<uint64_t> held;  // each thread holds a few allocations at a time
                    for (int i = 0; i < 20000; i++) {
                        if (held.size() >= 3 || (!held.empty() && rng() % 2)) {
                            size_t k = rng() % held.size();
                            truth[0].fetch_sub(held[k]);
                            c->release(d, held[k]);
                            held.erase(held.begin() + (long)k);
                            continue;
                        }
                        uint64_t bytes = 1 + rng() % (limit / 4);
                        uint64_t used;
                        if (!c->try_charge(d, bytes, &used)) continue;
                        uint64_t now = truth[0].fetch_add(bytes) + bytes;
                        uint64_t max = truth[1].load();
                        while (now > max && !truth[1].compare_exchange_weak(max, now)) {}
                        held.push_back(bytes);
                    }
                    for (uint64_t b : held) {
                        truth[0].fetch_sub(b);
                        c->release(d, b);
                    }
                });
            for (auto &t : threads) t.join();
            _exit(0);
        }
        kids.push_back(pid);
    }
    for (pid_t k : kids) {
        int status = 0;
        waitpid(k, &status, 0);
        CHECK(WIFEXITED(status));
    }
    CHECK(truth[1].load() <= limit);
    CHECK(truth[1].load() > limit / 2);  // the test did exercise the limit
    CHECK(l->container_used(d) == 0);
    munmap(truth, 4096);
    delete l;
    unlink(path.c_str());
}

TEST_CASE("ledger: two ledgers side by side do not affect each other") {
    std::string a = temp_path("side-a"), b = temp_path("side-b");
    Ledger *la = open_ledger(a, "1000"), *lb = open_ledger(b, "1000");
    int da = la->device_index(kUuid, 1000, 1000, "gpu"), db = lb->device_index(kUuid, 1000, 1000, "gpu");
    uint64_t used;
    CHECK(la->try_charge(da, 1000, &used));
    CHECK(lb->try_charge(db, 1000, &used));
    CHECK(la->container_used(da) == 1000);
    delete la;
    delete lb;
    unlink(a.c_str());
    unlink(b.c_str());
}

TEST_CASE("ledger: a private ledger needs no file") {
    OpenOptions o;
    o.limit_spec = "5";
    std::string error, notice;
    Ledger *l = Ledger::open(o, &error, &notice);
    REQUIRE(l);
    CHECK_FALSE(l->shared());
    int d = l->device_index(kUuid, 5, 10, "gpu");
    uint64_t used;
    CHECK(l->try_charge(d, 5, &used));
    CHECK_FALSE(l->try_charge(d, 1, &used));
    delete l;
}

// Whoever can write a ledger can set its limit and forge its counts (docs/threat-model.md): one owned
// by another user is refused unless it is shared with the group GPUGUARD_LEDGER_GROUP names, and one
// that every user may write is refused. Changing a file's owner needs root: skipped otherwise.
TEST_CASE("ledger: another user's ledger is refused unless shared with our group; a world-writable one always") {
    if (geteuid() != 0) {
        MESSAGE("skipped: changing a file's owner needs root");
        return;
    }
    const uid_t other_uid = 54321;
    const gid_t group = 43210, other_group = 43211;
    std::string path = temp_path("owner");
    auto try_open = [&](int want_group, bool read_only, std::string *error) {
        OpenOptions o;
        o.path = path;
        o.group = want_group;
        o.read_only = read_only;
        o.limit_spec = "1GiB";  // the ledger's own: a different one would replace the idle file with ours
        std::string notice;
        Ledger *l = Ledger::open(o, error, &notice);
        bool ok = l != nullptr;
        delete l;
        return ok;
    };
    delete open_ledger(path, "1GiB");
    std::string error;

    REQUIRE(chown(path.c_str(), other_uid, group) == 0);
    REQUIRE(chmod(path.c_str(), 0600) == 0);
    CHECK_FALSE(try_open(-1, false, &error));
    CHECK_MESSAGE(error.find("belongs to another user (uid 54321)") != std::string::npos, error);
    CHECK_MESSAGE(error.find(path) != std::string::npos, error);
    CHECK_FALSE(try_open(int(group), false, &error));  // our group, but the file is not group-writable

    REQUIRE(chmod(path.c_str(), 0660) == 0);
    error.clear();
    CHECK_MESSAGE(try_open(int(group), false, &error), error);  // shared with the group we name
    CHECK_FALSE(try_open(int(other_group), false, &error));     // shared, but with another group
    CHECK_MESSAGE(error.find("not shared with the group GPUGUARD_LEDGER_GROUP names") != std::string::npos, error);
    CHECK_FALSE(try_open(-1, false, &error));  // we name no group
    error.clear();
    CHECK_MESSAGE(try_open(-1, true, &error), error);  // read only (gpuguard top): reading forges nothing

    REQUIRE(chown(path.c_str(), geteuid(), getegid()) == 0);
    REQUIRE(chmod(path.c_str(), 0666) == 0);
    CHECK_FALSE(try_open(-1, false, &error));
    CHECK_MESSAGE(error.find("writable by every user (mode 666)") != std::string::npos, error);
    struct stat st;
    REQUIRE(stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0666);  // refused, and left as it was
    unlink(path.c_str());
}

TEST_CASE("ledger: forged text fields are shown bounded and without control bytes") {
    // Any process of the user can write the file: a command line that fills its field with no NUL,
    // and a device name carrying a terminal escape sequence (found by fuzz_ledger).
    std::string path = temp_path("forged-text");
    Ledger *l = open_ledger(path, "1000");
    int d = l->device_index(kUuid, 1000, 5000, "gpu");
    REQUIRE(d == 0);
    uint64_t used = 0;
    REQUIRE(l->try_charge(d, 10, &used));
    Header *h = l->header();
    memset(h->devices[d].name, 0, sizeof h->devices[d].name);
    memcpy(h->devices[d].name, "\x1b]0;owned\x07gpu", 13);
    int self = -1;
    for (int i = 0; i < kMaxSlots; i++)
        if (h->slots[i].state.load() == kSlotLive && h->slots[i].pid.load() == getpid()) self = i;
    REQUIRE(self >= 0);
    memset(h->slots[self].command, 'x', sizeof h->slots[self].command);  // no terminating NUL
    h->slots[self].command[3] = '\n';

    auto devices = l->devices();
    REQUIRE(devices.size() == 1);
    CHECK(devices[0].name == "?]0;owned?gpu");
    bool found = false;
    for (const auto &p : l->processes()) {
        if (p.slot != self) continue;
        found = true;
        CHECK(p.command.size() == sizeof h->slots[self].command);
        CHECK(p.command.substr(0, 5) == "xxx?x");
    }
    CHECK(found);
    l->release(d, 10);
    delete l;
    unlink(path.c_str());
}
