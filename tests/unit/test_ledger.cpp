#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <atomic>
#include <cstddef>
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

// Issue 20: the counters `gpuguard exporter` reads live in a struct of their own at the end of the
// header (layout 6), not in words other layouts reserve; a read-only view never adds to them.
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
    CHECK(l->header()->retired == 0);  // the word before: issue 18's, untouched by the counters
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

TEST_CASE("ledger: a dead process's slot is reclaimed, whatever its pid says") {
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

    // A slot that says live, with a pid that is alive (our parent's), but whose lock nobody holds:
    // its owner is gone (a pid in another PID namespace, or a process that exec'd, looks just so).
    Slot &fake = l->header()->slots[kMaxSlots - 1];
    fake.pid.store(getppid());
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

// Issue 18, defect 1: counts that cannot wrap, and a rollback that takes back exactly its charge.
TEST_CASE("ledger: no count wraps; a refused request leaves nothing charged") {
    OpenOptions o;
    o.limit_spec = "1000";
    std::string error, notice;
    Ledger *l = Ledger::open(o, &error, &notice);
    REQUIRE(l);
    int d = l->device_index(kUuid, 1000, 5000, "gpu");
    uint64_t used = 0;
    REQUIRE(l->try_charge(d, 600, &used));
    for (uint64_t huge : {UINT64_MAX, UINT64_MAX - 599, UINT64_MAX - 600, uint64_t(1) << 63, uint64_t(1001)}) {
        CHECK_FALSE(l->try_charge(d, huge, &used));
        CHECK(used == 600);
        CHECK(l->own_bytes(d) == 600);
    }
    CHECK_FALSE(l->charge(d, UINT64_MAX));  // would wrap: nothing added
    CHECK(l->own_bytes(d) == 600);
    CHECK(l->release(d, 600) == 600);
    delete l;

    o.limit_spec = "";
    l = Ledger::open(o, &error, &notice);
    REQUIRE(l);
    d = l->device_index(kUuid, kNoLimit, 5000, "gpu");
    REQUIRE(l->try_charge(d, 600, &used));
    CHECK_FALSE(l->try_charge(d, UINT64_MAX, &used));  // would wrap this process's count
    CHECK(l->own_bytes(d) == 600);
    REQUIRE(l->try_charge(d, UINT64_MAX - 600, &used));  // fits exactly: no limit
    CHECK(l->container_used(d) == UINT64_MAX);
    CHECK(l->release(d, UINT64_MAX - 600) == UINT64_MAX - 600);
    CHECK(l->container_used(d) == 600);
    // A forged count near UINT64_MAX in another slot saturates the sum instead of wrapping it.
    l->header()->slots[kMaxSlots - 1].bytes[d].store(UINT64_MAX - 100);
    l->header()->slot_high.store(kMaxSlots);
    CHECK(l->container_used(d) == UINT64_MAX);
    delete l;
}

#include "shim/quota/sizes.h"

TEST_CASE("sizes: a pitch or an array that would wrap saturates instead") {
    using namespace gg::sizes;
    CHECK(pitch_estimate(1, 1) == 512);
    CHECK(pitch_estimate(1000, 3) == 3 * 1024);
    CHECK(pitch_estimate(UINT64_MAX, 1) >= UINT64_MAX - 511);
    CHECK(pitch_estimate(UINT64_MAX - 10, 2) == UINT64_MAX);
    CHECK(pitch_estimate(1 << 20, uint64_t(1) << 50) == UINT64_MAX);
    CHECK(array_bytes(4, 0, 10, 0, 0) == 40);
    CHECK(array_bytes(4, 4, uint64_t(1) << 40, uint64_t(1) << 30, 1) == UINT64_MAX);
}

namespace {
int g_die_at_step = 0;
void die_at(int step) {
    if (step == g_die_at_step) _exit(42);
}

// Runs `body` in a child process; returns its exit status (-1 when it did not exit).
template <typename F>
int in_child(F body) {
    pid_t pid = fork();
    if (pid == 0) {
        body();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
}  // namespace

// Issue 18, defect 5: a process killed while it claimed its slot left the slot "claiming" for good:
// invisible to gpuguard top, never reclaimed, and with every slot so, every allocation refused.
TEST_CASE("ledger: a process killed at any step of claiming its slot leaks nothing") {
    std::string path = temp_path("claim-kill");
    Ledger *l = open_ledger(path, "1000");
    int d = l->device_index(kUuid, 1000, 5000, "gpu");
    uint64_t used = 0;
    REQUIRE(l->try_charge(d, 100, &used));
    for (int step = 1; step <= 4; step++) {
        CAPTURE(step);
        // A child takes over a dead process's slot (its bytes still counted), and dies at `step`.
        Slot &dead = l->header()->slots[kMaxSlots - 1];
        dead.bytes[d].store(500);
        dead.state.store(kSlotLive);
        l->header()->slot_high.store(kMaxSlots);
        for (int i = 0; i < kMaxSlots; i++)  // so that the child's only choice is the dead one
            if (&l->header()->slots[i] != &dead && l->header()->slots[i].state.load() != kSlotLive)
                l->header()->slots[i].state.store(kSlotLive);
        int status = in_child([&] {
            g_die_at_step = step;
            Ledger::claim_step_for_test = die_at;
            Ledger *c = open_ledger(path, "1000");
            uint64_t u;
            c->try_charge(d, 10, &u);
            _exit(1);
        });
        CHECK(status == 42);
        CHECK(l->container_used(d) <= 600);  // the dead slot's 500, or nothing of it: never more
        l->reclaim_dead(false);
        CHECK(l->container_used(d) == 100);  // ours alone: every other slot was reclaimed
        int left = 0;
        for (int i = 0; i < kMaxSlots; i++) {
            uint32_t st = l->header()->slots[i].state.load();
            if (st != kSlotFree && st != kSlotReclaimed && l->header()->slots[i].pid.load() != getpid()) left++;
        }
        CHECK(left == 0);
    }
    // Every slot left "claiming" by a killed claimer: a newcomer still gets one.
    for (int i = 0; i < kMaxSlots; i++)
        if (l->header()->slots[i].pid.load() != getpid()) l->header()->slots[i].state.store(kSlotClaiming);
    CHECK(in_child([&] {
              Ledger *c = open_ledger(path, "1000");
              uint64_t u;
              _exit(c->try_charge(d, 10, &u) ? 0 : 1);
          }) == 0);
    delete l;
    unlink(path.c_str());
}

// Issue 18, defects 4 and 13: liveness is the kernel's lock on a slot, not a pid. A forked child
// shares its parent's open file description (and so its locks) until it opens its own.
TEST_CASE("ledger: a forked child neither shares its parent's slot nor keeps it alive after the parent dies") {
    std::string path = temp_path("fork-lock");
    Ledger *l = open_ledger(path, "1000");
    int d = l->device_index(kUuid, 1000, 5000, "gpu");
    for (bool handler : {true, false}) {  // fork()'s child handler, or a clone() that runs none
        CAPTURE(handler);
        int to_parent[2];
        REQUIRE(pipe(to_parent) == 0);
        pid_t a = fork();
        if (a == 0) {
            Ledger *c = open_ledger(path, "1000");
            uint64_t u;
            if (!c->try_charge(d, 300, &u)) _exit(1);
            pid_t b = fork();
            if (b == 0) {
                if (handler) c->on_fork_child();
                else if (!c->try_charge(d, 200, &u)) _exit(1);  // joins: a slot of its own
                pid_t me = getpid();
                (void)!write(to_parent[1], &me, sizeof me);
                pause();
                _exit(0);
            }
            pause();
            _exit(0);
        }
        pid_t b = 0;
        REQUIRE(read(to_parent[0], &b, sizeof b) == (ssize_t)sizeof b);
        uint64_t expect = handler ? 300 : 500;
        CHECK(l->container_used(d) == expect);
        CHECK(l->reclaim_dead(false) == 0);  // A and B alive
        kill(a, SIGKILL);
        waitpid(a, nullptr, 0);
        CHECK(l->reclaim_dead(false) == 1);  // A's slot, although B shared its description once
        CHECK(l->container_used(d) == expect - 300);
        int alive = 0;
        for (const auto &p : l->processes()) alive += p.alive && !p.self;
        CHECK(alive == (handler ? 0 : 1));  // B, when it joined
        kill(b, SIGKILL);                   // an orphan now, reaped by whoever adopted it
        close(to_parent[0]);
        close(to_parent[1]);
    }
    delete l;
    unlink(path.c_str());
}

// Issue 18, defect 3: processes that replaced an idle ledger at the same time could end on two files.
TEST_CASE("ledger: processes racing to replace an idle ledger all end on the file at the path") {
    std::string path = temp_path("replace-race");
    for (int round = 0; round < 20; round++) {
        CAPTURE(round);
        delete open_ledger(path, "1MiB");  // idle, with a limit nobody below asks for
        int go[2], in[2], release[2];
        REQUIRE(pipe(go) == 0);
        REQUIRE(pipe(in) == 0);
        REQUIRE(pipe(release) == 0);
        std::vector<pid_t> kids;
        for (int k = 0; k < 6; k++) {
            pid_t pid = fork();
            if (pid == 0) {
                close(go[1]);
                close(release[1]);
                char c;
                (void)!read(go[0], &c, 1);  // all start together: when the parent closes `go`
                OpenOptions o;
                o.path = path;
                o.limit_spec = std::to_string(2 + k % 3) + "MiB";
                std::string error, notice;
                Ledger *l = Ledger::open(o, &error, &notice);
                if (!l) _exit(2);
                (void)!write(in[1], "x", 1);
                (void)!read(release[0], &c, 1);  // every child holds its slot until all are in
                // The file at the path is the one this process's slot is in (its creation time and
                // creator tell it from any other), and the slot is alive in it.
                Header at{};
                int fd = ::open(path.c_str(), O_RDONLY);
                bool same = fd >= 0 && pread(fd, &at, offsetof(Header, limit_spec), 0) > 0 &&
                            at.created_unix_ns == l->header()->created_unix_ns &&
                            at.creator_pid == l->header()->creator_pid;
                bool mine = false;
                for (const auto &p : l->processes()) mine |= p.self && p.alive;
                _exit(same && mine ? 0 : 1);
            }
            kids.push_back(pid);
        }
        close(in[1]);
        close(go[0]);
        close(go[1]);
        char c;
        for (int n = 0; n < 6 && read(in[0], &c, 1) == 1;) n++;
        close(release[0]);
        close(release[1]);
        int ok = 0;
        for (pid_t k : kids) {
            int status = 0;
            waitpid(k, &status, 0);
            ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
        }
        CHECK(ok == 6);
        close(in[0]);
    }
    unlink(path.c_str());
}

// A replacer killed between setting the old file's retired flag and its rename: the flag is stale.
TEST_CASE("ledger: a retired flag nobody stands behind is cleared, and the ledger opens") {
    std::string path = temp_path("stale-retired");
    delete open_ledger(path, "1GiB");
    auto retire = [&] {
        int fd = ::open(path.c_str(), O_RDWR);
        uint32_t one = 1;
        CHECK(pwrite(fd, &one, sizeof one, offsetof(Header, retired)) == (ssize_t)sizeof one);
        close(fd);
    };
    retire();
    std::string notice;
    Ledger *l = open_ledger(path, "1GiB", &notice);  // the same limit: the file stays
    CHECK(l->header()->retired.load() == 0);
    CHECK(l->limit_spec() == "1GiB");
    delete l;
    retire();
    l = open_ledger(path, "2GiB", &notice);  // another limit, idle: replaced
    CHECK(l->limit_spec() == "2GiB");
    delete l;
    unlink(path.c_str());
}

// With every slot held by a live process, a newcomer is told so in one line (it then keeps a quota of
// its own), and gets a slot as soon as one is free. The holder stands for 511 processes: each of its
// Ledgers is an open file description of its own, whose lock is a live process's to the others.
TEST_CASE("ledger: every slot held by a live process: one line naming it, and a slot once one is free") {
    std::string path = temp_path("full");
    Ledger *l = open_ledger(path, "1GiB");  // slot 0
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    pid_t holder = fork();
    if (holder == 0) {
        std::vector<Ledger *> all;
        for (int i = 1; i < kMaxSlots; i++) all.push_back(open_ledger(path, "1GiB"));
        (void)!write(ready[1], "x", 1);
        pause();
        _exit(0);
    }
    char c;
    REQUIRE(read(ready[0], &c, 1) == 1);
    auto open_in_child = [&] {
        return in_child([&] {
            OpenOptions o;
            o.path = path;
            o.limit_spec = "1GiB";
            std::string error, notice;
            Ledger *n = Ledger::open(o, &error, &notice);
            _exit(n ? 0 : error.find("all 512 slots are held by live processes") != std::string::npos ? 3 : 4);
        });
    };
    CHECK(open_in_child() == 3);
    // A child forked by the holder of the last slot finds none either, and can tell why (its refusals
    // say so): not joined, every slot held.
    CHECK(in_child([&] {
              l->on_fork_child();
              _exit(!l->join() && !l->joined() && l->slots_all_held() ? 0 : 5);
          }) == 0);
    CHECK(!l->slots_all_held());  // the parent holds its slot
    kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
    CHECK(open_in_child() == 0);
    close(ready[0]);
    close(ready[1]);
    delete l;
    unlink(path.c_str());
}
