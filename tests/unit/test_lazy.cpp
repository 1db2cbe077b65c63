// A real function found lazily (shim/resolve/real.h, Lazy): kept once found; while missing, looked
// up again only after the loader has added an object. A hook whose library is absent (the CPU
// benchmark calls c10's profiler hooks without libc10) once paid a full dlsym walk per call.
#include <dlfcn.h>
#include <doctest/doctest.h>

#include "shim/resolve/real.h"

using namespace gg;

namespace {

int g_lookups = 0;
void *g_answer = nullptr;
void *counting_find(const char *) {
    ++g_lookups;
    return g_answer;
}
using Fn = int (*)(int);
int twice(int x) { return 2 * x; }

}  // namespace

TEST_CASE("a missing function is looked up again only after the loader adds an object") {
    g_lookups = 0;
    g_answer = nullptr;
    static Lazy<Fn> lazy{"no_such_function"};
    CHECK(!lazy.get(counting_find));
    CHECK(!lazy.get(counting_find));
    CHECK(!lazy.get(counting_find));
    CHECK(g_lookups == 1);

    // A library loaded now (glibc's libresolv: present wherever glibc is, never linked by the tests)
    // moves the loader's count, so the next call looks again, and keeps what it finds.
    unsigned long long before = loader_additions();
    void *h = dlopen("libresolv.so.2", RTLD_NOW | RTLD_LOCAL);
    REQUIRE_MESSAGE(h, "libresolv.so.2 could not be loaded: ", dlerror());
    CHECK(loader_additions() > before);
    g_answer = reinterpret_cast<void *>(&twice);
    CHECK((lazy.get(counting_find) == &twice));
    CHECK(g_lookups == 2);
    CHECK((lazy.get(counting_find) == &twice));
    CHECK(g_lookups == 2);
    dlclose(h);
}
