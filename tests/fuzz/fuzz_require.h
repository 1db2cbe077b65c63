// FUZZ_REQUIRE(cond): a promise of the code under test. A broken one is reported like a crash, with
// the condition and its line: through the sanitizer's report channel, because run.sh closes the
// target's own stderr (-close_fd_mask) to keep the code's one-line warnings out of the log.
#pragma once
#include <sanitizer/common_interface_defs.h>
#include <cstdio>
#include <cstdlib>

[[noreturn]] inline void fuzz_broken_promise(const char *cond, const char *file, int line) {
    char msg[512];
    snprintf(msg, sizeof msg, "broken promise at %s:%d: %s", file, line, cond);
    __sanitizer_report_error_summary(msg);
    abort();
}

#define FUZZ_REQUIRE(cond)                                           \
    do {                                                             \
        if (!(cond)) fuzz_broken_promise(#cond, __FILE__, __LINE__); \
    } while (0)
