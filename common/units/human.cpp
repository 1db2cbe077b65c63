#include "common/units/human.h"

#include <climits>
#include <cstdio>
#include <ctime>

namespace gg {

std::string human_bytes(uint64_t bytes) {
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) return std::to_string(bytes) + " B";
    double v = static_cast<double>(bytes) / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
    return buf;
}

std::string human_delta(int64_t delta) {
    if (delta == 0) return "0 B";
    uint64_t mag = delta < 0 ? static_cast<uint64_t>(-(delta + 1)) + 1 : static_cast<uint64_t>(delta);
    return (delta < 0 ? "-" : "+") + human_bytes(mag);
}

std::string human_duration_ns(int64_t ns) {
    char buf[48];
    double s = static_cast<double>(ns) / 1e9;
    if (ns < 0) return "-" + human_duration_ns(ns == INT64_MIN ? INT64_MAX : -ns);  // -INT64_MIN overflows
    if (ns < 1000000) snprintf(buf, sizeof buf, "%.0f us", static_cast<double>(ns) / 1e3);
    else if (ns < 1000000000) snprintf(buf, sizeof buf, "%.0f ms", static_cast<double>(ns) / 1e6);
    else if (s < 120) snprintf(buf, sizeof buf, "%.1f s", s);
    else if (s < 7200) snprintf(buf, sizeof buf, "%d min %d s", static_cast<int>(s / 60), static_cast<int>(s) % 60);
    else snprintf(buf, sizeof buf, "%d h %d min", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
    return buf;
}

std::string human_time_unix_ns(int64_t ns) {
    time_t t = static_cast<time_t>(ns / 1000000000);
    struct tm tm;
    gmtime_r(&t, &tm);
    char buf[64];
    strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
    return buf;
}

int percent(uint64_t part, uint64_t whole) {
    if (whole == 0) return 0;
    // Saturated: a forged or odd report (18 EiB used of a 1-byte limit) must not overflow the cast.
    long double p = (static_cast<long double>(part) * 100.0L) / whole + 0.5L;
    return p >= static_cast<long double>(INT_MAX) ? INT_MAX : static_cast<int>(p);
}

}  // namespace gg
