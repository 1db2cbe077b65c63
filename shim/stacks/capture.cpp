// Capture: the hot path of stacks (raw addresses, one hash, one short lock). Pieces: unwind.h (which
// unwinder), reuse.h (a Python call site's stack unwound once), table.h (dedup), words.h (how a stack
// is stored); render.cpp turns a stored stack into a report's frames.
#include "shim/stacks/stacks.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "common/base/hot.h"
#include "common/base/log.h"
#include "shim/base/per_thread.h"
#include "shim/base/profile.h"
#include "shim/python/frames.h"
#include "shim/stacks/census.h"
#include "shim/stacks/cfi_walker.h"
#include "shim/stacks/eval_loop.h"
#include "shim/stacks/reuse.h"
#include "shim/stacks/table.h"
#include "shim/stacks/unwind.h"
#include "shim/stacks/words.h"

namespace gg::stacks {
namespace {

constexpr int kMaxDepth = 128;
constexpr int kMaxPython = 128;
// Frames between the unwinder and capture()'s caller (capture, its helpers, the unwinder's own
// entry); they are found by return address, this only sizes the buffer.
constexpr int kSlack = 16;
static_assert(kMaxDepth + kPyWords * kMaxPython <= int(table::kMaxWords), "a stack must fit the table");

std::atomic<int> g_depth{48};
std::atomic<bool> g_python{false};
std::atomic<bool> g_reuse{false};

// Set while this thread is inside capture(): an unwinder that allocates, under a profiler that hooks
// malloc and captures, would otherwise recurse. initial-exec: no __tls_get_addr (which may allocate)
// on the hot path; the shim is preloaded, so its TLS is in the static block.
__attribute__((tls_model("initial-exec"))) thread_local bool t_busy = false;

bool stop_at_eval_loop(uintptr_t ip) { return py::is_eval_loop(ip); }

// This thread's site cache (shim/stacks/reuse.h), freed at thread exit. (Not a C++ thread_local with a
// destructor: an allocation in a later thread-exit handler could use it after it ran; this one is
// simply made again.)
PerThread<reuse::SiteCache> g_sites;

// Whether two native frames are the same for a site: equal, or both inside the eval loop, where
// exactly moves as CPython specialises its instructions (shim/stacks/reuse.h).
bool same_native_frame(uintptr_t a, uintptr_t b) { return a == b || (py::is_eval_loop(a) && py::is_eval_loop(b)); }

// Whether two stacks of one site key are the same: equal, or different only in where inside the
// eval loop a native frame stood. Only where a check found other native frames, so the copies do not
// matter.
bool same_site_stack(StackId a, StackId b) {
    if (a == b) return true;
    std::vector<uintptr_t> wa, wb;
    uint32_t na = 0, nb = 0;
    if (!table::get(a, &wa, &na) || !table::get(b, &wb, &nb) || na != nb || wa.size() != wb.size()) return false;
    for (size_t i = 0; i < wa.size(); ++i)
        if (wa[i] != wb[i] && !(i < na && same_native_frame(wa[i], wb[i]))) return false;
    return true;
}

// How many of a walk's n frames a stack keeps: with Python frames (`cut`), those up to and including
// the innermost eval loop, whichever unwinder walked on past it (see stop_at_eval_loop).
int native_kept(const uintptr_t *frames, int n, bool cut) {
    int kept = 0;
    while (kept < n && !(cut && kept > 0 && py::is_eval_loop(frames[kept - 1]))) kept++;
    return kept;
}

// Where capture()'s caller stands in a walk: found by its return address, robust to inlining and tail
// calls inside the shim and to each unwinder's idea of where the walk starts. -1 when not found.
GG_HOT int caller_index(void *const *raw, int n, void *return_address) {
    for (int i = 0; i < n && i < kSlack; ++i)
        if (raw[i] == return_address) return i;
    return -1;
}

// The deepest caller_index() found so far: how many frames of the shim and the unwinder a walk
// passes before it reaches capture()'s caller (the same few for every call; kSlack until known), so
// that a walk asks for only the frames it keeps.
std::atomic<int> g_caller_at{-1};

GG_HOT int frames_above_caller() {
    int at = g_caller_at.load(std::memory_order_relaxed);
    return at < 0 ? kSlack : at + 1;
}

// Where the caller stands in this walk (0 when not found), remembered for the next walks.
GG_HOT int locate_caller(void *const *raw, int n, void *return_address) {
    int at = caller_index(raw, n, return_address);
    if (at < 0) return 0;
    if (at > g_caller_at.load(std::memory_order_relaxed)) g_caller_at.store(at, std::memory_order_relaxed);
    return at;
}

// The native return addresses from capture()'s caller outward, `skip` of them dropped, at most
// `depth`: walked (cut at the innermost eval loop when `stop` says so), then the shim's own frames
// and the unwinder's passed over by the caller's return address. Returns how many are in frames[]
// (none where `tag_only` is a salt the caching walker recalled the walk's tag under: unwind::backtrace).
GG_HOT int caller_frames(uintptr_t *frames, int skip, int depth, void *return_address, unwind::StopFn stop,
                         int tag_only = -1) {
    void *raw[kSlack + 2 * kMaxDepth];
    int want = frames_above_caller() + skip + depth;
    int n = unwind::backtrace(raw, want < int(std::size(raw)) ? want : int(std::size(raw)), stop, tag_only);
    int kept = 0;
    for (int i = locate_caller(raw, n, return_address) + skip; i < n && kept < depth; ++i)
        frames[kept++] = reinterpret_cast<uintptr_t>(raw[i]);
    return kept;
}

// A Python site's key before any frame: the skip. Not the native depth (stack pointer): the depth of
// the C stack below its eval loop changes as CPython specialises and despecialises the calls further
// out (a specialised call runs in the same eval loop, an unspecialised one enters a new one), which
// would make the same site a new key at every few steps; what lies between the allocation and the
// innermost eval loop does not change.
uint64_t site_seed(int skip) { return reuse::mix(0, uint64_t(skip)); }

// `key` extended with every native return address between the caller and the innermost eval loop
// (that frame itself left out: where inside the eval loop it stood moves as CPython specialises), at
// most `depth`: an unstable Python site, whose native paths differ somewhere below its Python frames.
// That part is all that can differ under one whole Python key (a key of the innermost frames is checked
// against it before, settle_deep below), so each path becomes a site of its own. A fixed few innermost frames were not
// enough: in PyTorch they all lie in c10's allocator, and two operators' paths part 15 to 25 frames out (at::empty
// against at::empty_strided). The walk stops at the eval loop, and the caching walker recalls it from the stack words
// it read before (shim/stacks/walk_memo.h) when they are the same. The native part is walked once per capture
// (`*native`, 0 until then): a site keyed first by its innermost Python frames and then by all of them (settle_deep
// below) extends both keys with it.
uint64_t with_native_frames(uint64_t key, uint64_t *native, int skip, int depth, void *return_address) {
    if (!*native) {
        GG_PROFILE_STEP(kCaptureNativeKey);
        uintptr_t frames[kMaxDepth];
        int n = caller_frames(frames, skip, depth, return_address, stop_at_eval_loop);
        uint64_t h = 0;
        for (int i = 0; i < n && !py::is_eval_loop(frames[i]); ++i) h = reuse::mix(h, frames[i]);
        *native = h ? h : 1;
    }
    key = reuse::mix(key, *native);
    return key ? key : 1;  // 0 marks an empty slot
}

// `key` extended with where a stack stood, under a tag of its own for each kind of place, so that such a
// key never equals one extended by native frames or by the other kind of place:
// - kCStackPlace: capture's own frame address (the same for the same native path, within one thread,
//   whose site cache this is): an unstable site's;
// - kPythonStackPlace: the address of the first Python frame a key of the innermost frames left out
//   (py::site_key's `beyond`), which the frames further out decide by their number and sizes: a deep site's.
enum PlaceTag : uint64_t { kCStackPlace = 0x5354u, kPythonStackPlace = 0x414eu };
GG_HOT uint64_t with_place(uint64_t key, PlaceTag tag, uintptr_t place) {
    key = reuse::mix(reuse::mix(key, tag), place);
    return key ? key : 1;  // 0 marks an empty slot
}

// A site without Python frames (PyTorch's autograd threads, C++ programs): its native stack, walked
// by the caching walker, is recalled from the stack words the walk read before (shim/stacks/walk_memo.h),
// and the stack id attached to that walk is the answer; nothing is interned again. The memo answers
// when every word the walk would read is the same, or, once it trusts the walk, when the words at its
// start's forks are, checked in full one recall in 32 (walk_memo.h: a site keyed by its depth and
// the words where its paths part). Before the memo these sites were keyed by their innermost return
// addresses, which the autograd thread's backward functions share: such a site's stack changed under
// its key, it was marked unstable and unwound at every allocation (BENCHMARKS.md).
// The walk is tagged under a salt of the frames skipped (the id depends on them too). The walker says
// whether it went to the thread's outermost frame (unwind::last_walk: not cut short, and not
// stopped at code without unwind information): a whole C stack without Python frames, which says the
// same of every stack that recalls it (answered_without_python).
struct NativeWalk {
    uintptr_t words[kMaxDepth];
    int n = 0;
    StackId id = 0;      // the tag of a recalled walk (no words then)
    bool whole = false;  // the walk went to the thread's outermost frame
    uint16_t salt = 0;
};

GG_HOT void walk_native(NativeWalk &w, int skip, int depth, void *return_address) {
    GG_PROFILE_STEP(kCaptureNative);
    w.salt = uint16_t(skip);
    // A walk recalled with its id gives no frames: the id is all this needs.
    w.n = caller_frames(w.words, skip, depth, return_address, nullptr, w.salt);
    cfi::LastWalk last = unwind::last_walk(w.salt);
    w.id = last.tag;
    w.whole = last.whole;
}

GG_HOT StackId native_answer(const NativeWalk &w) {
    if (w.id) {
        census::note(census::Kind::kNative, census::Outcome::kReuse);
        reuse::counts().add(reuse::Counts::kReused);
        return w.id;
    }
    census::note(census::Kind::kNative, census::Outcome::kMiss);
    reuse::counts().add(reuse::Counts::kUnwound);
    StackId id = table::intern(w.words, uint32_t(w.n), uint32_t(w.n));
    if (id) unwind::tag_last_walk(id, w.salt);
    return id;
}

GG_HOT StackId capture_native(int skip, int depth, void *return_address) {
    NativeWalk w;
    walk_native(w, skip, depth, return_address);
    return native_answer(w);
}

// A reuse due for its check, confirmed by its native frames alone. Under one Python key (every
// Python frame's code object and instruction) only the native frames between the allocation and the
// innermost eval loop can differ, so the cached stack is still the answer when those are the same (up
// to where in the eval loop the innermost one stood). The walk stops at the eval loop and the caching
// walker recalls it from the stack words it read before (shim/stacks/walk_memo.h), where a full
// capture would describe every Python frame and unwind anew: 10 µs a check on the GPU machine, for
// every site at each of its 11 checks in the first 1024 reuses (BENCHMARKS.md). False sends the
// capture on to unwind and compare in full, as before.
bool confirmed_by_native_frames(StackId cached, int skip, int depth, void *return_address) {
    GG_PROFILE_STEP(kCaptureCheck);
    uintptr_t fresh[kMaxDepth], kept[kMaxDepth];
    int n = native_kept(fresh, caller_frames(fresh, skip, depth, return_address, stop_at_eval_loop), true);
    uint32_t n_native = 0, words = table::copy(cached, kept, kMaxDepth, &n_native);
    // Without Python words the cached stack was not cut at the eval loop: nothing to compare it with.
    if (words == n_native || n_native != uint32_t(n)) return false;
    for (int i = 0; i < n; ++i)
        if (!same_native_frame(fresh[i], kept[i])) return false;
    return true;
}

// How many of the innermost Python frames a site's key reads. The walk of a deep stack is most of a
// key's cost on the GPU machine (about 5 ns a frame: the outer frames are out of the nearer caches by
// the next allocation, BENCHMARKS.md), and generate()'s stacks are 60 frames deep; the innermost
// frames tell almost every site apart. The frames further out are checked now and then, by the whole
// stack's key stored with the site (SiteCache::deep_due): a site whose whole stack changed under its
// key is keyed next by where its Python stack stands, and where that fails too by every frame
// (settle_deep).
constexpr int kKeyFrames = 12;

// A Python site's lookup in this thread's site cache (shim/stacks/reuse.h), before anything is
// unwound or described: `answer` is set when the cached stack is the answer. Otherwise the capture
// goes on to unwind, and tells the cache what it found (`sites` null: unwound every time).
struct SiteLookup {
    reuse::SiteCache *sites = nullptr;
    uint64_t key = 0;
    uint64_t whole = 0;      // stored with the stack: the whole Python key when `key` covers only the innermost frames
    uint64_t native = 0;     // the native frames' part of an unstable site's key, once walked
    uintptr_t stack_at = 0;  // where this thread's stack stood at the capture: an unstable site's first extension
    uintptr_t beyond = 0;  // the first Python frame `key` left out (0: it read them all): a deep site's first extension
    StackId cached = 0;
    reuse::SiteCache::Verdict verdict = reuse::SiteCache::Verdict::kMiss;
};

// The key's lookup, extended where the site is unstable: first by where the thread's stack stands (free:
// the native paths under one Python line almost always differ in depth: generate()'s first token's
// against the next ones'), and where that is unstable too (two paths of one depth), by the native
// frames themselves (a walk, about 800 ns on the GPU machine, 24 a decode step before). A key with the
// stack's depth is checked on the same schedule as any other (SiteCache::due), by the native frames, so
// a second path of the same depth is found as a Python key's second path is. The depth of the C stack
// under one Python stack moves while CPython specialises its calls (site_seed): warm-up costs a few more
// captures, and only for unstable sites; a site whose depth keeps moving on one path (alloca) stops
// trying it after SiteCache::kMaxExtensionMisses keys not found. `stored_whole` is set from the slot found.
// Returns the census's kind of key.
GG_HOT census::Kind look_up(SiteLookup &site, int skip, int depth, void *return_address, uint64_t *stored_whole) {
    {
        GG_PROFILE_STEP(kCaptureLookup);
        site.verdict = site.sites->lookup(site.key, &site.cached, stored_whole);
    }
    if (site.verdict != reuse::SiteCache::Verdict::kUnstable) return census::Kind::kPython;
    census::note(census::Kind::kPython, census::Outcome::kUnstable);
    uint64_t python_key = site.key;
    if (site.sites->extensions_help(python_key)) {
        site.key = with_place(python_key, kCStackPlace, site.stack_at);
        site.verdict = site.sites->lookup(site.key, &site.cached, stored_whole);
        if (site.verdict == reuse::SiteCache::Verdict::kMiss) site.sites->missed_extension(python_key);
        if (site.verdict != reuse::SiteCache::Verdict::kUnstable) return census::Kind::kPythonDepth;
        census::note(census::Kind::kPythonDepth, census::Outcome::kUnstable);
    }
    site.key = with_native_frames(python_key, &site.native, skip, depth, return_address);
    site.verdict = site.sites->lookup(site.key, &site.cached, stored_whole);
    return census::Kind::kPythonExtended;
}

// A deep site's key extended by where its Python stack stands (with_place), looked up before any
// frame further out is read. A site is deep when it is reached from two places beyond its innermost
// frames, and most such places put the Python stack at different heights: a step called from a warm-up
// loop and from the loop proper, a model's forward from a training and an evaluation loop. Then each
// place is a key of its own, checked on the usual schedule against the whole stack's key stored with
// it (settle_deep), and an allocation reads no frame beyond the innermost ones. Two places at one
// height share the extended key: a check that finds another whole stack gives the key that stack (a step
// warmed up from one line and timed from another leaves the first for good), and the third such change
// marks it deep in turn (two callers that take turns), after which the whole key decides, as before. A site whose
// extended keys keep missing (a generator's frame lives in the generator, at a new address for each one) gives them up
// (kMaxExtensionMisses).
GG_HOT census::Kind look_up_anchored(SiteLookup &site, int skip, int depth, void *return_address,
                                     uint64_t *stored_whole, census::Kind kind) {
    uint64_t short_key = site.key;
    if (!site.beyond || !site.sites->extensions_help(short_key)) return kind;
    site.key = with_place(short_key, kPythonStackPlace, site.beyond);
    kind = look_up(site, skip, depth, return_address, stored_whole);
    if (kind != census::Kind::kPython) return kind;  // its own extensions' misses were counted against it
    if (site.verdict == reuse::SiteCache::Verdict::kMiss) site.sites->missed_extension(short_key);
    return census::Kind::kPythonAnchored;
}

// A key of the innermost frames only (or one extended by where the Python stack stands): a miss stores
// the whole stack's key with what it captures, and a reuse due for its deep check compares it. A site
// found deep (another whole stack under its key) is tried by its anchored key first (look_up_anchored),
// then by the whole key, which is exact as every key was before.
// Where the whole key cannot be had (the interpreter began finalising between the two walks), the
// capture unwinds and keeps nothing: a short key stored without a whole one would never be checked.
census::Kind settle_deep(SiteLookup &site, int skip, int depth, void *return_address, uint64_t stored_whole,
                         census::Kind kind) {
    using Verdict = reuse::SiteCache::Verdict;
    if (site.verdict == Verdict::kDeep && kind == census::Kind::kPython)
        kind = look_up_anchored(site, skip, depth, return_address, &stored_whole, kind);
    if (site.verdict != Verdict::kMiss && site.verdict != Verdict::kCheck && site.verdict != Verdict::kCheckDeep &&
        site.verdict != Verdict::kDeep)
        return kind;
    uint64_t whole;
    {
        GG_PROFILE_STEP(kCaptureWholeKey);
        whole = py::site_key(site_seed(skip));
    }
    reuse::counts().add(reuse::Counts::kWholeKeys);
    if (!whole) {
        site.verdict = Verdict::kMiss;
        site.sites = nullptr;
        return kind;
    }
    if (site.verdict == Verdict::kMiss) {
        site.whole = whole;
        return kind;
    }
    if (site.verdict != Verdict::kDeep) {
        reuse::counts().add(reuse::Counts::kDeepChecks);
        if (whole == stored_whole) {
            if (site.verdict == Verdict::kCheckDeep) site.verdict = Verdict::kReuse;
            return kind;
        }
        if (kind == census::Kind::kPythonAnchored && site.sites->may_change_whole(site.key)) {
            site.verdict = Verdict::kMiss;  // unwound in full and stored as a miss's: the key's new stack
            site.whole = whole;
            return kind;
        }
        site.sites->mark_deep(site.key);
    }
    site.key = whole;
    site.whole = 0;
    kind = look_up(site, skip, depth, return_address, &stored_whole);
    return kind == census::Kind::kPython ? census::Kind::kPythonWhole : kind;
}

// A verdict the flow above settles (a deep check, a deep site) left over only where a whole or extended
// key equals a short key of another site: unwound and kept nowhere, not counted as a census outcome.
GG_HOT bool settled(SiteLookup &site) {
    using Verdict = reuse::SiteCache::Verdict;
    if (site.verdict != Verdict::kCheckDeep && site.verdict != Verdict::kDeep) return true;
    site.verdict = Verdict::kMiss;
    site.sites = nullptr;
    return false;
}

// Whether this thread's last capture found no Python frame: it then walks first, and asks CPython
// only where the walk says nothing (below).
__attribute__((tls_model("initial-exec"))) thread_local bool t_no_python = false;

// Asks CPython for the thread's Python site key (0: no Python frame), remembered for the next capture.
GG_HOT bool has_python_key(SiteLookup &site, int skip) {
    GG_PROFILE_STEP(kCapturePythonKey);
    site.key = py::site_key(site_seed(skip), kKeyFrames, &site.beyond);
    t_no_python = !site.key;
    return site.key != 0;
}

// A thread without Python frames has its native walk for a key, and the stack it was interned as for an
// answer. A thread whose last capture had none walks before asking CPython: PyTorch's autograd threads
// keep a thread state, so they were asked for a frame at every allocation, CPython's calls and cold lines,
// about 90 ns on the GPU machine (BENCHMARKS.md). A walk recalled with a tag, and which went to the
// outermost frame (whole), is the answer at once: the memo recalls a walk whose every word is as it was,
// so this C stack is, to its outermost frame, one that had no Python frame when the tag was attached
// (Python code runs on a thread only inside CPython's eval loop, which would be on this stack); or, once
// it trusts the walk, one whose words at the start's forks are (walk_memo.h): a path through Python at the
// very same depth that agrees there (a backward hook written in Python, on the autograd thread) would take
// the walk's stack, Python frames and all missing, until a check lands on it, as any new path at a trusted
// start would. Such a path is deeper than the paths without Python it runs beside (the eval loop's frames
// come on top), so it almost always starts at a depth of its own. (This assumes the walk's end is the
// thread's own start: a fiber whose stack lies within the thread's and whose entry marks its return
// address undefined, as Boost.Context's does, would end a walk too; the walker declines stacks outside the
// thread's.) A walk that stopped at code without unwind information says nothing of the frames outside it,
// so it is not whole. Anything else (no tag, a walk cut short, a new walk) asks CPython as before. One
// call walks, so that a site's walks all start at one depth and share one memo entry.
GG_HOT bool answered_without_python(SiteLookup &site, int skip, int depth, void *return_address, StackId *answer) {
    bool asked = !t_no_python;
    if (asked && has_python_key(site, skip)) return false;
    NativeWalk w;
    walk_native(w, skip, depth, return_address);
    if (!asked && !(w.id && w.whole) && has_python_key(site, skip)) return false;
    *answer = native_answer(w);
    return true;
}

GG_HOT bool answered_by_site(SiteLookup &site, int skip, int depth, void *return_address, StackId *answer) {
    if (answered_without_python(site, skip, depth, return_address, answer)) return true;
    uint64_t stored_whole = 0;
    census::Kind kind = look_up(site, skip, depth, return_address, &stored_whole);
    if (site.beyond) kind = settle_deep(site, skip, depth, return_address, stored_whole, kind);
    if (!settled(site)) return false;
    census::note(kind, census::Outcome(int(site.verdict)));
    if (site.verdict == reuse::SiteCache::Verdict::kCheck &&
        confirmed_by_native_frames(site.cached, skip, depth, return_address)) {
        reuse::counts().add(reuse::Counts::kChecks);
        site.verdict = reuse::SiteCache::Verdict::kReuse;
    }
    if (site.verdict == reuse::SiteCache::Verdict::kReuse) {
        reuse::counts().add(reuse::Counts::kReused);
        *answer = site.cached;
        return true;
    }
    if (site.verdict == reuse::SiteCache::Verdict::kUnstable) site.sites = nullptr;  // unwound every time
    return false;
}

GG_HOT StackId capture_unguarded(int skip, void *return_address) {
    int depth = g_depth.load(std::memory_order_relaxed);
    skip = skip < 0 ? 0 : skip > kMaxDepth ? kMaxDepth : skip;
    bool python = g_python.load(std::memory_order_relaxed) && py::available();

    // A site seen before is found by its key, before anything is unwound or described.
    SiteLookup site;
    // Where the stack stands: this frame's address (not a local's, which AddressSanitizer's fake stacks
    // move to the heap at each call).
    site.stack_at = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    if (depth > 0 && g_reuse.load(std::memory_order_relaxed) && (site.sites = g_sites.get())) {
        StackId answer = 0;
        if (!python) return capture_native(skip, depth, return_address);
        if (answered_by_site(site, skip, depth, return_address, &answer)) return answer;
    }

    // Python frames: with them the native walk can stop at the eval loop. They are written past the
    // room for native frames and moved down to follow them once those are known.
    uintptr_t words[kMaxDepth + kPyWords * kMaxPython];
    uintptr_t *py_words = words + kMaxDepth;
    int n_py = 0;
    if (python) {
        GG_PROFILE_STEP(kCapturePython);
        py::Frame frames[kMaxPython];
        n_py = py::capture(frames, kMaxPython);
        n_py = n_py < 0 ? 0 : n_py > kMaxPython ? kMaxPython : n_py;
        if (n_py) learn_eval_loop();  // before the walk below stops at the eval loop
        uintptr_t *w = py_words;
        for (int i = 0; i < n_py; ++i, w += kPyWords) {
            w[0] = reinterpret_cast<uintptr_t>(frames[i].file);
            w[1] = reinterpret_cast<uintptr_t>(frames[i].function);
            w[2] = uintptr_t(uint32_t(frames[i].line)) << 1 | uintptr_t(frames[i].entry);
        }
    }

    // Cut the native frames at the eval loop only when the Python frames were read: otherwise they
    // are all this stack has.
    bool cut = n_py > 0;
    int n_native = 0;
    if (depth > 0) {
        GG_PROFILE_STEP(kCaptureNative);
        // With Python frames, the native walk can end at the innermost eval loop: the frames below
        // it are the interpreter's, and the Python frames tell more about them (the merge places all
        // Python frames after that eval-loop frame). Where the unwinder can stop, that saves most of
        // a deep interpreter stack.
        int n = caller_frames(words, skip, depth, return_address, cut ? stop_at_eval_loop : nullptr);
        reuse::counts().add(reuse::Counts::kUnwound);
        n_native = native_kept(words, n, cut);
    }
    if (n_py && n_native < kMaxDepth) memmove(words + n_native, py_words, sizeof(uintptr_t) * kPyWords * n_py);

    StackId id;
    {
        GG_PROFILE_STEP(kCaptureIntern);
        id = table::intern(words, uint32_t(n_native + kPyWords * n_py), uint32_t(n_native));
    }
    census::unwound(site.key, id);
    if (site.sites && id) {
        if (site.verdict == reuse::SiteCache::Verdict::kMiss) {
            site.sites->store(site.key, id, site.whole);
        } else {
            reuse::counts().add(reuse::Counts::kChecks);
            site.sites->checked(site.key, same_site_stack(site.cached, id), id);
        }
    }
    return id;
}

}  // namespace

void configure(int depth, bool python, bool reuse) {
    g_depth.store(depth < 0 ? 0 : depth > kMaxDepth ? kMaxDepth : depth, std::memory_order_relaxed);
    g_python.store(python, std::memory_order_relaxed);
    g_reuse.store(reuse, std::memory_order_relaxed);
}

void warm_up() {
    // The unwinder and the Python runtime are found now, from the shim's initialisation, rather
    // than in the first capture, which might run in a signal handler or with the driver's locks held.
    if (g_depth.load(std::memory_order_relaxed) > 0) unwind::name();
    // is_eval_loop() finds the eval loop's range on first use: now, not inside an unwinder's callback.
    if (g_python.load(std::memory_order_relaxed) && py::available()) py::is_eval_loop(0);
}

// noinline: __builtin_return_address(0) must be the return address into our caller's frame, the one
// the unwinder reports for it.
GG_HOT __attribute__((noinline)) StackId capture(int skip) {
    if (t_busy) return 0;
    t_busy = true;
    StackId id = capture_unguarded(skip, __builtin_return_address(0));
    t_busy = false;
    return id;
}

size_t count() { return table::count(); }

ReuseCounts reuse_counts() {
    const reuse::Counts &c = reuse::counts();
    using C = reuse::Counts;
    return {c.total(C::kReused),
            c.total(C::kUnwound),
            c.total(C::kChecks),
            c.changes.load(std::memory_order_relaxed),
            c.unstable_sites.load(std::memory_order_relaxed),
            c.evicted.load(std::memory_order_relaxed),
            c.threads.load(std::memory_order_relaxed),
            c.total(C::kDeepChecks),
            c.deep_sites.load(std::memory_order_relaxed),
            c.total(C::kWholeKeys)};
}

WalkerCounts walker_counts() {
    cfi::Counts c = cfi::counts();
    return {c.walks, c.rule_misses, c.fallbacks, c.recalled, c.trusted};
}

const char *unwinder() { return unwind::name(); }

}  // namespace gg::stacks
