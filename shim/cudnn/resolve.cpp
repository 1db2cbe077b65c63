#include "shim/cudnn/resolve.h"

#include <dlfcn.h>
#include <link.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/base/log.h"
#include "shim/cudnn/record.h"
#include "shim/resolve/real.h"

namespace gg::cudnn {
namespace {

// Depth of cuDNN hooks on this thread. initial-exec: the shim is preloaded, its TLS is static.
__attribute__((tls_model("initial-exec"))) thread_local int t_depth = 0;

const char *base_name(const char *path) {
    const char *slash = path ? strrchr(path, '/') : nullptr;
    return slash ? slash + 1 : path ? path : "";
}

// "libcudnn.so.N" for N >= 8: the split cuDNN, whose libcudnn.so is a dispatcher into sub-libraries.
bool is_dispatcher_name(const char *base) {
    if (strncmp(base, "libcudnn.so.", 12) != 0) return false;
    return atoi(base + 12) >= 8;
}
bool is_sublibrary_name(const char *base) { return strncmp(base, "libcudnn_", 9) == 0; }

// Not a C++ static: dladdr takes the loader's lock, and cuDNN hooks run inside dlopen (shim/base/race_once.h).
const void *shim_base() {
    static std::atomic<const void *> base{nullptr};
    const void *b = base.load(std::memory_order_acquire);
    if (!b) {
        Dl_info info{};
        b = dladdr(reinterpret_cast<void *>(&entry_of), &info) ? info.dli_fbase : nullptr;
        base.store(b, std::memory_order_release);
    }
    return b;
}

// The module `fn` lies in; false for the shim itself (or no module).
bool module_of(void *fn, Dl_info *info) { return fn && dladdr(fn, info) && info->dli_fbase != shim_base(); }

// Loaded cuDNN sub-libraries, by path, and the loader's add-count (glibc's dlpi_adds).
struct Loaded {
    static constexpr int kMax = 32;
    char paths[kMax][512];
    int n = 0;
    unsigned long long generation = 0;
};

int collect(struct dl_phdr_info *info, size_t, void *data) {
    Loaded &l = *static_cast<Loaded *>(data);
    l.generation = info->dlpi_adds;
    if (l.n < Loaded::kMax && info->dlpi_name && is_sublibrary_name(base_name(info->dlpi_name))) {
        snprintf(l.paths[l.n], sizeof l.paths[l.n], "%s", info->dlpi_name);
        l.n++;
    }
    return 0;
}

// The definition of `name` in a loaded sub-library: dlsym on the library's own handle (its local
// scope, which holds neither the shim nor the dispatcher), checked with dladdr all the same.
void *find_terminal(const char *name, unsigned long long *generation) {
    Loaded l;
    dl_iterate_phdr(collect, &l);  // no dlopen inside the callback: it runs under the loader's lock
    *generation = l.generation;
    for (int i = 0; i < l.n; i++) {
        void *h = dlopen(l.paths[i], RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        void *p = real_dlsym(h, name);
        dlclose(h);  // NOLOAD took a reference; the dispatcher still holds its own
        Dl_info info{};
        if (module_of(p, &info) && is_sublibrary_name(base_name(info.dli_fname))) return p;
    }
    return nullptr;
}

// The report names the library the program loaded (the dispatcher), not the sub-library.
void note_present(const char *name, void *fn) {
    void *e = entry_of(name);
    Dl_info info{};
    if (dladdr(e ? e : fn, &info)) present(info.dli_fname);
}

}  // namespace

void *entry_of(const char *symbol) {
    // By soname among loaded objects only (NOLOAD): never load a cuDNN the program did not load.
    static const char *const kDispatchers[] = {"libcudnn.so.9", "libcudnn.so.8"};
    for (const char *lib : kDispatchers) {
        void *h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        void *p = real_dlsym(h, symbol);
        dlclose(h);
        Dl_info info{};
        if (module_of(p, &info)) return p;
    }
    // Another layout (a cuDNN linked into a framework, a renamed copy): the next definition after ours.
    void *p = real_dlsym(RTLD_NEXT, symbol);
    Dl_info info{};
    return module_of(p, &info) ? p : nullptr;
}

void *Slot::resolve(bool outermost) {
    void *t = terminal.load(std::memory_order_acquire);
    if (t) return t;
    unsigned long long now = loader_additions();
    if (now != miss_generation.load(std::memory_order_relaxed)) {
        t = find_terminal(name, &now);
        if (t) {
            terminal.store(t, std::memory_order_release);
            log_debug("cuDNN %s: calling the definition in its sub-library", name);
            note_present(name, t);
            return t;
        }
        miss_generation.store(now, std::memory_order_relaxed);
    }
    if (!outermost) return nullptr;  // inside cuDNN: never through the dispatcher a second time
    void *e = entry.load(std::memory_order_acquire);
    if (!e) {
        e = entry_of(name);
        if (!e) return nullptr;
        entry.store(e, std::memory_order_release);
        note_present(name, e);
        Dl_info info{};
        if (dladdr(e, &info) && !is_dispatcher_name(base_name(info.dli_fname))) {
            // A library that is not the split cuDNN's dispatcher defines the function itself.
            terminal.store(e, std::memory_order_release);
            log_debug("cuDNN %s: calling the definition in %s", name, info.dli_fname);
        }
    }
    return e;
}

Gate::Gate(Slot &slot) : outermost_(t_depth++ == 0), fn_(slot.resolve(outermost_)) {}
Gate::~Gate() { t_depth--; }

}  // namespace gg::cudnn

namespace gg {
void *real_cudnn_fn(const char *symbol) { return cudnn::entry_of(symbol); }
}  // namespace gg
