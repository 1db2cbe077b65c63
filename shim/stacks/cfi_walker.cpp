#include "shim/stacks/cfi_walker.h"

#include <link.h>
#include <pthread.h>

#include <atomic>
#include <cstring>

#include "common/base/hot.h"
#include "shim/base/per_thread.h"
#include "shim/base/thread_counters.h"
#include "shim/stacks/census.h"
#include "shim/stacks/cfi_rule_table.h"
#include "shim/stacks/walk_memo.h"

// libgcc's lookup of the .eh_frame entry (FDE) covering an address, through _dl_find_object or
// dl_iterate_phdr: linked statically into the shim, exported by libgcc_s.so.1 elsewhere. It is in no
// public header; its signature has not changed since GCC 3 (unwind-dw2-fde.h). The second argument
// receives {text base, data base, the FDE's function start}.
extern "C" const void *_Unwind_Find_FDE(void *pc, void *bases);
#pragma weak _Unwind_Find_FDE

namespace gg::stacks::cfi {
namespace {

#if defined(__x86_64__)
constexpr bool kArchSupported = true;
#else
constexpr bool kArchSupported = false;
#endif

// DWARF register numbers on x86-64 (System V psABI, figure 3.36).
constexpr uint64_t kRegRbp = 6, kRegRsp = 7, kRegReturnAddress = 16;

// What a frame's rule says: where its CFA (the caller's stack pointer) is, and where the return
// address and the caller's rbp were saved, as offsets from the CFA.
struct Rule {
    enum Kind : uint8_t {
        kFromRsp,       // CFA = rsp + cfa_offset
        kFromRbp,       // CFA = rbp + cfa_offset
        kLoadedAtRbp,   // CFA = *(rbp + cfa_offset): a realigned frame (see run_program)
        kEnd,           // the outermost frame (return address undefined): the walk went to the end
        kNoUnwindInfo,  // code without unwind information: the walk ends here, short of the outermost frame
        kUnsupported,   // walk() gives up on this stack
    };
    Kind kind = kUnsupported;
    enum RbpKind : uint8_t {
        kRbpKept,   // the caller's rbp is this frame's
        kRbpAtCfa,  // saved at CFA + rbp_offset
        kRbpAtRbp,  // saved at rbp + rbp_offset (a realigned frame)
    };
    RbpKind rbp = kRbpKept;
    int16_t rbp_offset = 0;
    int16_t return_address_offset = 0;
    int32_t cfa_offset = 0;
};

// The dynamic loader's running counts of objects loaded and unloaded.
struct LoaderCounts {
    unsigned long long loads = 0, unloads = 0;
};

// One thread's rules and what it knows of its own stack.
struct ThreadTable {
    RuleTable<Rule> rules;                    // 192 KiB (shim/stacks/cfi_rule_table.h)
    WalkMemo memo;                            // 680 KiB (shim/stacks/walk_memo.h)
    uint32_t generation = 0;                  // raised whenever rules are forgotten: memos go with them
    uintptr_t stack_low = 0, stack_high = 0;  // [low, high): this thread's stack; high 0 = unknown
    bool bounds_tried = false;
    LoaderCounts loader;  // as of the last check
    int walks_to_loader_check = 0;
};

PerThread<ThreadTable> g_tables;
// Per thread (shim/base/thread_counters.h): walks and recalls are counted at every capture.
enum Counter { kWalks, kRuleMisses, kFallbacks, kRecalled, kTrusted, kCounters };
ThreadCounters<kCounters> g_counts;

// ---- Reading .eh_frame: bounded little-endian reads; a read past the entry's end sets `bad`.
struct Bytes {
    const uint8_t *p, *end;
    bool bad = false;

    bool has(size_t n) {
        if (bad || size_t(end - p) < n) bad = true;
        return !bad;
    }
    template <class T>
    T fixed() {
        T v{};
        if (has(sizeof v)) memcpy(&v, p, sizeof v), p += sizeof v;
        return v;
    }
    uint64_t uleb() {
        uint64_t v = 0;
        for (int shift = 0; has(1); shift += 7) {
            uint8_t b = *p++;
            if (shift < 64) v |= uint64_t(b & 0x7f) << shift;
            if (!(b & 0x80)) return v;
        }
        return 0;
    }
    int64_t sleb() {
        uint64_t v = 0;
        int shift = 0;
        for (; has(1);) {
            uint8_t b = *p++;
            if (shift < 64) v |= uint64_t(b & 0x7f) << shift;
            shift += 7;
            if (!(b & 0x80)) {
                if (shift < 64 && (b & 0x40)) v |= ~uint64_t(0) << shift;
                return int64_t(v);
            }
        }
        return 0;
    }
    void skip(uint64_t n) {
        if (has(n)) p += n;
    }
    // Skips a pointer in the DW_EH_PE encoding `enc` (its value is not needed: libgcc gives the
    // function start, and a CIE's personality routine plays no part in unwinding).
    void skip_encoded(uint8_t enc) {
        if (enc == 0xff) return;  // DW_EH_PE_omit
        switch (enc & 0x0f) {
            case 0x00: skip(8); break;  // absptr
            case 0x01:
            case 0x09: (void)uleb(); break;  // uleb128, sleb128
            case 0x02:
            case 0x0a: skip(2); break;  // (s)data2
            case 0x03:
            case 0x0b: skip(4); break;  // (s)data4
            case 0x04:
            case 0x0c: skip(8); break;  // (s)data8
            default: bad = true;
        }
    }
    // A length in the DW_EH_PE encoding `enc` (its format only: a length is never relative).
    uint64_t encoded_length(uint8_t enc) {
        switch (enc & 0x0f) {
            case 0x00:
            case 0x04:
            case 0x0c: return fixed<uint64_t>();  // absptr, (s)data8
            case 0x01: return uleb();
            case 0x02:
            case 0x0a: return fixed<uint16_t>();
            case 0x03:
            case 0x0b: return fixed<uint32_t>();
            default: bad = true; return 0;
        }
    }
};

// A factored offset times its alignment factor, wrapping as the hardware would rather than
// overflowing (undefined in C++): only nonsense input gets that far, and the rule checks reject it.
int64_t scaled(uint64_t factored, int64_t align) { return int64_t(factored * uint64_t(align)); }

// An entry of .eh_frame (a CIE or an FDE) at `at`: its contents after the length, and where the
// CIE-id / CIE-pointer field is. 64-bit DWARF (length 0xffffffff) has an 8-byte id field.
bool open_entry(const uint8_t *at, Bytes *body, bool *wide) {
    uint32_t len32;
    memcpy(&len32, at, 4);
    at += 4;
    uint64_t len = len32;
    *wide = len32 == 0xffffffffu;
    if (*wide) {
        memcpy(&len, at, 8);
        at += 8;
    }
    if (len == 0 || len > (1u << 24)) return false;  // a terminator, or not an entry we believe
    *body = Bytes{at, at + len};
    return true;
}

// The state of one row of the CFA table, for the registers a walk needs.
struct RegRule {
    enum Kind : uint8_t { kSame, kOffset, kAtRbp, kUndefined, kOther } kind = kSame;  // kAtRbp: saved at rbp + offset
    int64_t offset = 0;
};
struct Row {
    uint64_t cfa_reg = ~uint64_t(0);
    int64_t cfa_offset = 0;
    bool cfa_expression = false;  // one this walker does not evaluate
    bool cfa_loaded = false;      // CFA = *(cfa_reg + cfa_offset)
    RegRule rbp, ra;
    RegRule *reg(uint64_t r) { return r == kRegRbp ? &rbp : r == kRegReturnAddress ? &ra : nullptr; }
    const RegRule *reg(uint64_t r) const { return const_cast<Row *>(this)->reg(r); }
};

struct Cie {
    uint64_t code_align = 1;
    int64_t data_align = 1;
    uint8_t fde_encoding = 0;
    bool has_augmentation_data = false;
    Bytes initial;  // the CIE's initial instructions
};

bool parse_cie(const uint8_t *at, Cie *cie) {
    Bytes b{nullptr, nullptr};
    bool wide = false;
    if (!open_entry(at, &b, &wide)) return false;
    uint64_t id = wide ? b.fixed<uint64_t>() : b.fixed<uint32_t>();
    uint8_t version = b.fixed<uint8_t>();
    if (b.bad || id != 0 || (version != 1 && version != 3)) return false;
    const char *aug = reinterpret_cast<const char *>(b.p);
    b.skip(strnlen(aug, size_t(b.end - b.p)) + 1);
    if (b.bad) return false;           // no NUL inside the entry
    if (strstr(aug, "eh")) b.skip(8);  // a GCC 2 relic: the exception table's address
    cie->code_align = b.uleb();
    cie->data_align = b.sleb();
    uint64_t ra_reg = version == 1 ? b.fixed<uint8_t>() : b.uleb();
    if (b.bad || ra_reg != kRegReturnAddress) return false;
    if (aug[0] == 'z') {
        cie->has_augmentation_data = true;
        uint64_t n = b.uleb();
        if (!b.has(n)) return false;
        Bytes data{b.p, b.p + n};
        for (const char *c = aug + 1; *c && !data.bad; ++c) {
            if (*c == 'R') cie->fde_encoding = data.fixed<uint8_t>();
            else if (*c == 'L') (void)data.fixed<uint8_t>();
            else if (*c == 'P') data.skip_encoded(data.fixed<uint8_t>());
            else if (*c == 'S') return false;  // a signal trampoline: registers come from a ucontext
            else break;                        // unknown letters come last; the length covers them
        }
        b.p += n;
    } else if (aug[0] != '\0') {
        return false;  // without 'z' an unknown augmentation cannot be skipped
    }
    if (b.bad) return false;
    cie->initial = b;
    return true;
}

// The block of a DW_CFA_*expression instruction (its length, then its bytes), consumed from b.
Bytes expression_block(Bytes &b) {
    uint64_t n = b.uleb();
    if (!b.has(n)) return Bytes{b.p, b.p, true};
    Bytes e{b.p, b.p + n};
    b.p += n;
    return e;
}

// Whether an expression is exactly "rbp + k" (DW_OP_breg6 k), or with deref "*(rbp + k)"
// (DW_OP_breg6 k, DW_OP_deref): the two that realigned frames use.
bool rbp_relative(Bytes e, int64_t *k, bool deref) {
    constexpr uint8_t kOpBreg6 = 0x76, kOpDeref = 0x06;
    if (e.fixed<uint8_t>() != kOpBreg6) return false;
    *k = e.sleb();
    if (deref && e.fixed<uint8_t>() != kOpDeref) return false;
    return !e.bad && e.p == e.end;
}

// Runs call-frame instructions until the row for `pc` is reached. `initial` is the row after the
// CIE's instructions (for DW_CFA_restore); nullptr while running those.
bool run_program(Bytes b, const Cie &cie, uintptr_t loc, uintptr_t pc, Row *row, const Row *initial) {
    constexpr int kMaxRemembered = 8;
    Row remembered[kMaxRemembered];
    int depth = 0;
    auto set = [&](uint64_t r, RegRule::Kind k, int64_t off) {
        if (RegRule *rr = row->reg(r)) *rr = RegRule{k, off};
    };
    auto restore = [&](uint64_t r) {
        if (RegRule *rr = row->reg(r)) *rr = initial ? *initial->reg(r) : RegRule{};
    };
    while (b.p < b.end && !b.bad) {
        uint8_t op = b.fixed<uint8_t>();
        uint64_t advance = 0;
        if ((op & 0xc0) == 0x40) advance = (op & 0x3f) * cie.code_align;
        else if ((op & 0xc0) == 0x80) set(op & 0x3f, RegRule::kOffset, scaled(b.uleb(), cie.data_align));
        else if ((op & 0xc0) == 0xc0) restore(op & 0x3f);
        else switch (op) {
                case 0x00: break;  // nop
                case 0x02: advance = b.fixed<uint8_t>() * cie.code_align; break;
                case 0x03: advance = b.fixed<uint16_t>() * cie.code_align; break;
                case 0x04: advance = b.fixed<uint32_t>() * cie.code_align; break;
                case 0x05: {
                    uint64_t r = b.uleb();
                    set(r, RegRule::kOffset, scaled(b.uleb(), cie.data_align));
                    break;
                }
                case 0x06: restore(b.uleb()); break;
                case 0x07: set(b.uleb(), RegRule::kUndefined, 0); break;
                case 0x08: set(b.uleb(), RegRule::kSame, 0); break;
                case 0x09: {
                    uint64_t r = b.uleb();
                    (void)b.uleb();
                    set(r, RegRule::kOther, 0);
                    break;
                }
                case 0x0a:
                    if (depth == kMaxRemembered) return false;
                    remembered[depth++] = *row;
                    break;
                case 0x0b:
                    if (depth == 0) return false;
                    *row = remembered[--depth];
                    break;
                case 0x0c:
                    row->cfa_reg = b.uleb();
                    row->cfa_offset = int64_t(b.uleb());
                    row->cfa_expression = row->cfa_loaded = false;
                    break;
                case 0x0d:
                    row->cfa_reg = b.uleb();
                    row->cfa_expression = row->cfa_loaded = false;
                    break;
                case 0x0e: row->cfa_offset = int64_t(b.uleb()); break;
                case 0x0f: {
                    // A function that realigns its stack and also moves it by a run-time amount keeps
                    // the incoming stack pointer in a register ("DRAP") saved below its rbp; GCC then
                    // gives the CFA as "rbp + k, dereferenced". That one expression is evaluated.
                    int64_t k = 0;
                    Bytes e = expression_block(b);
                    row->cfa_loaded = rbp_relative(e, &k, /*deref=*/true);
                    row->cfa_expression = !row->cfa_loaded;
                    row->cfa_reg = kRegRbp;
                    row->cfa_offset = k;
                    break;
                }
                case 0x10: {  // ... and rbp saved at rbp + k (DW_OP_breg6 k): the other expression it uses
                    uint64_t r = b.uleb();
                    int64_t k = 0;
                    Bytes e = expression_block(b);
                    if (rbp_relative(e, &k, /*deref=*/false)) set(r, RegRule::kAtRbp, k);
                    else set(r, RegRule::kOther, 0);
                    break;
                }
                case 0x16: {
                    uint64_t r = b.uleb();
                    b.skip(b.uleb());
                    set(r, RegRule::kOther, 0);
                    break;
                }
                case 0x11: {
                    uint64_t r = b.uleb();
                    set(r, RegRule::kOffset, scaled(uint64_t(b.sleb()), cie.data_align));
                    break;
                }
                case 0x12:
                    row->cfa_reg = b.uleb();
                    row->cfa_offset = scaled(uint64_t(b.sleb()), cie.data_align);
                    row->cfa_expression = row->cfa_loaded = false;
                    break;
                case 0x13: row->cfa_offset = scaled(uint64_t(b.sleb()), cie.data_align); break;
                case 0x14: {
                    uint64_t r = b.uleb();
                    (void)b.uleb();
                    set(r, RegRule::kOther, 0);
                    break;
                }
                case 0x15: {
                    uint64_t r = b.uleb();
                    (void)b.sleb();
                    set(r, RegRule::kOther, 0);
                    break;
                }
                case 0x2e: (void)b.uleb(); break;  // GNU_args_size
                case 0x2f: {
                    uint64_t r = b.uleb();
                    set(r, RegRule::kOffset, scaled(0 - b.uleb(), cie.data_align));
                    break;
                }                       // negated
                default: return false;  // DW_CFA_set_loc and vendor operations: not emitted for x86-64 code we meet
            }
        if (advance) {
            loc += advance;
            if (loc > pc) break;  // the row for pc is complete
        }
    }
    return !b.bad;
}

Rule unsupported() {
    Rule r;
    r.kind = Rule::kUnsupported;
    return r;
}

// An FDE at `fde` with its CIE: `b` then stands at the function's start (bases[2] has it decoded).
bool open_fde(const uint8_t *fde, Bytes *b, Cie *cie) {
    bool wide = false;
    if (!open_entry(fde, b, &wide)) return false;
    const uint8_t *id_at = b->p;
    uint64_t cie_pointer = wide ? b->fixed<uint64_t>() : b->fixed<uint32_t>();
    return !b->bad && cie_pointer != 0 && parse_cie(id_at - cie_pointer, cie);
}

// The rule that the .eh_frame entry (FDE) at `fde`, for a function starting at `start`, gives for `pc`.
Rule rule_from_fde(const uint8_t *fde, uintptr_t start, uintptr_t pc) {
    Rule r;
    Bytes b{nullptr, nullptr};
    Cie cie;
    if (!open_fde(fde, &b, &cie)) return unsupported();
    b.skip_encoded(cie.fde_encoding);                  // the function start: bases[2] has it
    b.skip_encoded(uint8_t(cie.fde_encoding & 0x0f));  // the function's length
    if (cie.has_augmentation_data) b.skip(b.uleb());
    if (b.bad) return unsupported();

    Row row;
    if (!run_program(cie.initial, cie, start, pc, &row, nullptr)) return unsupported();
    Row initial = row;
    if (!run_program(b, cie, start, pc, &row, &initial)) return unsupported();

    if (row.ra.kind == RegRule::kUndefined) {  // the outermost frame (_start, a thread's start)
        r.kind = Rule::kEnd;
        return r;
    }
    bool cfa_ok = !row.cfa_expression && (row.cfa_reg == kRegRsp || row.cfa_reg == kRegRbp) &&
                  (row.cfa_loaded ? row.cfa_reg == kRegRbp && row.cfa_offset >= -4096 && row.cfa_offset <= 4096
                                  : row.cfa_offset > 0 && row.cfa_offset < (int64_t(1) << 30));
    bool ra_ok = row.ra.kind == RegRule::kOffset && row.ra.offset < 0 && row.ra.offset >= -4096;
    bool rbp_ok = row.rbp.kind == RegRule::kSame || row.rbp.kind == RegRule::kUndefined ||
                  (row.rbp.kind == RegRule::kOffset && row.rbp.offset < 0 && row.rbp.offset >= -4096) ||
                  (row.rbp.kind == RegRule::kAtRbp && row.rbp.offset >= -4096 && row.rbp.offset <= 4096);
    if (!cfa_ok || !ra_ok || !rbp_ok) return unsupported();
    r.kind = row.cfa_loaded ? Rule::kLoadedAtRbp : row.cfa_reg == kRegRsp ? Rule::kFromRsp : Rule::kFromRbp;
    r.cfa_offset = int32_t(row.cfa_offset);
    r.return_address_offset = int16_t(row.ra.offset);
    r.rbp = row.rbp.kind == RegRule::kOffset  ? Rule::kRbpAtCfa
            : row.rbp.kind == RegRule::kAtRbp ? Rule::kRbpAtRbp
                                              : Rule::kRbpKept;
    r.rbp_offset = int16_t(row.rbp.offset);
    return r;
}

// The rule for the code at `pc` (a return address minus one, or walk()'s own pc).
Rule find_rule(uintptr_t pc) {
    g_counts.add(kRuleMisses);
    void *bases[3] = {nullptr, nullptr, nullptr};  // text base, data base, function start
    const void *fde = _Unwind_Find_FDE(reinterpret_cast<void *>(pc), bases);
    if (!fde || !bases[2]) {
        Rule r;
        r.kind = Rule::kNoUnwindInfo;  // as for libgcc: code without unwind information ends the walk
        return r;
    }
    return rule_from_fde(static_cast<const uint8_t *>(fde), reinterpret_cast<uintptr_t>(bases[2]), pc);
}

const Rule &rule_for(ThreadTable *t, uintptr_t pc) {
    if (const Rule *known = t->rules.find(pc)) return *known;
    return t->rules.store(pc, find_rule(pc));
}

int loader_counts(dl_phdr_info *info, size_t, void *out) {
    *static_cast<LoaderCounts *>(out) = {info->dlpi_adds, info->dlpi_subs};
    return 1;  // every object reports the same counters: the first is enough
}

// Forgets rules that libraries loaded or unloaded since the last check may have made wrong, and
// learns the thread's stack bounds once. An unload makes any rule of its addresses stale: all go.
// A load only maps code where there was none, so only the "no unwind information here" answers
// (kNoUnwindInfo) go. PyTorch keeps loading libraries after its first steps (cuDNN 9 and cuBLAS open their
// sub-libraries on first use); forgetting every rule at each load would have each thread learn its
// thousands of rules again.
GG_HOT void refresh(ThreadTable *t) {
    if (--t->walks_to_loader_check <= 0) {
        t->walks_to_loader_check = kLoaderCheckEvery;
        LoaderCounts now;
        dl_iterate_phdr(loader_counts, &now);
        if (now.unloads != t->loader.unloads) t->rules.forget_all();
        else if (now.loads != t->loader.loads)
            t->rules.forget_if([](const Rule &r) { return r.kind == Rule::kNoUnwindInfo; });
        if (now.unloads != t->loader.unloads || now.loads != t->loader.loads) t->generation++;
        t->loader = now;
    }
    if (!t->bounds_tried) {
        t->bounds_tried = true;
        pthread_attr_t attr;
        if (pthread_getattr_np(pthread_self(), &attr) == 0) {
            void *addr = nullptr;
            size_t size = 0;
            if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr && size) {
                t->stack_low = reinterpret_cast<uintptr_t>(addr);
                t->stack_high = t->stack_low + size;
            }
            pthread_attr_destroy(&attr);
        }
    }
}

// A word of the stack. Not instrumented: the sanitizers' view of other frames' slots (redzones,
// another thread's writes long ago) says nothing about a return address or a saved rbp.
__attribute__((no_sanitize_address, no_sanitize_thread)) uintptr_t load_word(uintptr_t at) {
    return *reinterpret_cast<const uintptr_t *>(at);
}

// The walk proper, from (pc, sp, fp), each word it depends on told to `rec` (null: not recorded). A
// saved rbp is told only once a rule reads it: code built without frame pointers keeps data in rbp,
// which differs from call to call and would make no two walks alike, and a walk through such frames
// never reads it.
int walk_frames(ThreadTable *t, uintptr_t pc, uintptr_t sp, uintptr_t fp, void **ips, int max, StopFn stop,
                WalkMemo::Recording *rec, uintptr_t *slots = nullptr) {
    const uintptr_t sp0 = sp, high = t->stack_high;
    // Every slot read lies in the part of this thread's stack that is in use, and frames rise towards
    // the stack's base: a wrong rule cannot make the walk fault or loop.
    auto in_use = [&](uintptr_t at) { return at >= sp && at <= high - sizeof(uintptr_t); };
    bool fp_loaded = false, fp_told = false;  // fp came from the stack (at fp_at), and rec was told so
    uintptr_t fp_at = 0;
    auto read_fp = [&] {  // a rule reads fp: the walk depends on where it came from
        if (!rec) return fp;
        if (!fp_loaded) rec->read_fp = true;
        else if (!fp_told) rec->load(sp0, fp_at, fp, false), fp_told = true;
        return fp;
    };
    int n = 0;
    for (bool first = true; n < max; first = false) {
        const Rule &r = rule_for(t, first ? pc : pc - 1);
        if (r.kind == Rule::kEnd || r.kind == Rule::kNoUnwindInfo) {
            if (rec) rec->whole = r.kind == Rule::kEnd;  // only a true end says what lies outside
            return n;
        }
        uintptr_t cfa = 0;
        switch (r.kind) {
            case Rule::kFromRsp: cfa = sp + uintptr_t(intptr_t(r.cfa_offset)); break;
            case Rule::kFromRbp: cfa = read_fp() + uintptr_t(intptr_t(r.cfa_offset)); break;
            case Rule::kLoadedAtRbp: {
                uintptr_t at = read_fp() + uintptr_t(intptr_t(r.cfa_offset));
                if (!in_use(at)) return -1;
                cfa = load_word(at);
                if (rec) rec->load(sp0, at, cfa, false);
                break;
            }
            default: return -1;  // kUnsupported
        }
        uintptr_t ra_at = cfa + uintptr_t(intptr_t(r.return_address_offset));
        uintptr_t rbp_at = (r.rbp == Rule::kRbpAtRbp ? read_fp() : cfa) + uintptr_t(intptr_t(r.rbp_offset));
        if (cfa <= sp || cfa > high || !in_use(ra_at)) return -1;
        if (r.rbp != Rule::kRbpKept && !in_use(rbp_at)) return -1;
        uintptr_t ra = load_word(ra_at);
        if (rec) rec->load(sp0, ra_at, ra, true);
        if (r.rbp != Rule::kRbpKept) fp = load_word(rbp_at), fp_at = rbp_at, fp_loaded = true, fp_told = false;
        sp = cfa;
        pc = ra;
        if (!pc) return n;  // some thread starts end with a zero return address instead of a rule
        if (slots) slots[n] = ra_at;
        ips[n++] = reinterpret_cast<void *>(pc);
        if (stop && stop(pc)) return n;
    }
    return n;
}

void census_eviction(WalkMemo::Evicted e) {
    if (e == WalkMemo::Evicted::kSameStart) census::memo(census::Memo::kEvictedSameStart);
    if (e == WalkMemo::Evicted::kOtherStart) census::memo(census::Memo::kEvictedOtherStart);
}

// The walk, from its own frame outward (see walk()): remembered by the words it read, and recalled
// from them (shim/stacks/walk_memo.h).
// Where a walk from the calling function starts: this thread's table, its rules refreshed, and the
// caller's own pc, sp and fp. Inlined, so the registers are the caller's: the rule of that very
// instruction (from the shim's own .eh_frame) describes that rsp, and walking from there needs nothing
// from a ucontext. Null without a table. No walk is the memo's last until recall() or remember() says
// so: a walk declined by the caller (another stack: a fiber's, a signal stack) must not leave the walk
// before it as the last, whose tag a capture would take for this stack's.
struct Here {
    uintptr_t pc = 0, sp = 0, fp = 0;
};
__attribute__((always_inline)) inline ThreadTable *start_here(Here *h) {
    if (!available()) return nullptr;
    ThreadTable *t = g_tables.get();
    if (!t) return nullptr;
    t->memo.clear_last();
    refresh(t);
#if defined(__x86_64__)
    asm volatile("leaq 0(%%rip), %0\n\tmovq %%rsp, %1\n\tmovq %%rbp, %2" : "=r"(h->pc), "=r"(h->sp), "=r"(h->fp));
#endif
    return t;
}

// Whether sp lies on the thread's own stack (not an alternate signal stack, a coroutine's stack).
bool on_own_stack(const ThreadTable *t, uintptr_t sp) {
    return t->stack_high && sp >= t->stack_low && sp < t->stack_high;
}

GG_HOT __attribute__((noinline)) int walk_from_here(void **ips, int max, StopFn stop, int tag_only) {
    Here h;
    ThreadTable *t = start_here(&h);
    if (!t) return -1;
    g_counts.add(kWalks);
    const uintptr_t pc = h.pc, sp = h.sp, fp = h.fp, high = t->stack_high;
    if (!on_own_stack(t, sp)) return -1;
    WalkMemo::Start at{sp, fp, uint32_t(high - sp), max, reinterpret_cast<const void *>(stop)};
    if (max > WalkMemo::kMaxLoads) {
        t->memo.clear_last();
        return walk_frames(t, pc, sp, fp, ips, max, stop, nullptr);
    }
    auto stack_word = [](uintptr_t a) { return load_word(a); };
    int n = t->memo.recall(at, t->generation, ips, stack_word, tag_only);
    if (n >= 0) {
        g_counts.add(kRecalled);
        census::memo(census::Memo::kRecalled);
        if (t->memo.trusted()) {
            g_counts.add(kTrusted);
            census::memo(census::Memo::kTrusted);
        }
        return n;
    }
    census::memo(t->memo.missed_with_start() ? census::Memo::kWordsDiffer : census::Memo::kNoStart);
    WalkMemo::Recording rec;
    n = walk_frames(t, pc, sp, fp, ips, max, stop, &rec);
    if (n >= 0) {
        t->memo.remember(at, t->generation, rec, stack_word);
        census_eviction(t->memo.last_eviction());
    }
    return n;
}

}  // namespace

bool available() { return kArchSupported && &_Unwind_Find_FDE != nullptr; }

GG_HOT int walk(void **ips, int max, StopFn stop, int tag_only) {
    int n = walk_from_here(ips, max, stop, tag_only);
    if (n < 0) g_counts.add(kFallbacks);
    return n;
}

__attribute__((noinline)) int walk_with_slots(void **ips, uintptr_t *slots, int max) {
    Here h;
    ThreadTable *t = start_here(&h);
    if (!t || !on_own_stack(t, h.sp)) return -1;
    // Nothing recalled or kept: the walk itself writes each slot beside its return address. One that
    // fails further out (-1) still gives the frames it read before: ips are written in order, none null.
    for (int i = 0; i < max; i++) ips[i] = nullptr;
    int n = walk_frames(t, h.pc, h.sp, h.fp, ips, max, nullptr, nullptr, slots);
    if (n >= 0) return n;
    int read = 0;
    while (read < max && ips[read]) read++;
    return read ? read : -1;
}

bool function_range(uintptr_t pc, uintptr_t *lo, uintptr_t *hi) {
    if (!available()) return false;
    void *bases[3] = {nullptr, nullptr, nullptr};  // text base, data base, function start
    const auto *fde = static_cast<const uint8_t *>(_Unwind_Find_FDE(reinterpret_cast<void *>(pc), bases));
    if (!fde || !bases[2]) return false;
    Bytes b{nullptr, nullptr};
    Cie cie;
    if (!open_fde(fde, &b, &cie)) return false;
    b.skip_encoded(cie.fde_encoding);  // the start: bases[2] has it decoded
    uint64_t length = b.encoded_length(cie.fde_encoding);
    *lo = reinterpret_cast<uintptr_t>(bases[2]);
    *hi = *lo + length;
    return !b.bad && length > 0 && pc >= *lo && pc < *hi;
}

int rule_kind_of_entry(const uint8_t *fde, uintptr_t start, uintptr_t pc) {
    switch (rule_from_fde(fde, start, pc).kind) {
        case Rule::kFromRsp:
        case Rule::kFromRbp:
        case Rule::kLoadedAtRbp: return 0;
        case Rule::kEnd: return 1;
        default: return 2;
    }
}

GG_HOT LastWalk last_walk(uint16_t salt) {
    ThreadTable *t = g_tables.peek();
    const WalkMemo::Tag *tag = t ? t->memo.last() : nullptr;
    if (!tag) return {};
    return {tag->salt == salt ? tag->value : 0, tag->whole};
}

void tag_last_walk(uint32_t value, uint16_t salt) {
    ThreadTable *t = g_tables.peek();
    WalkMemo::Tag *tag = t ? t->memo.last() : nullptr;
    if (!tag) return;
    tag->value = value;  // its whole flag stays the walk's
    tag->salt = salt;
}

Counts counts() {
    return {g_counts.total(kWalks), g_counts.total(kRuleMisses), g_counts.total(kFallbacks), g_counts.total(kRecalled),
            g_counts.total(kTrusted)};
}

}  // namespace gg::stacks::cfi
