#include "common/units/size_spec.h"

#include "common/units/human.h"

#include <strings.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace gg {
namespace {

// Spaces only: any other whitespace is a control byte, refused (printable()).
std::string trim(const std::string &s) {
    size_t b = 0, e = s.size();
    while (b < e && s[b] == ' ') b++;
    while (e > b && s[e - 1] == ' ') e--;
    return s.substr(b, e - b);
}

// Whether every byte is printable ASCII; else *why names the first that is not.
bool printable(const std::string &raw, std::string *why) {
    for (size_t i = 0; i < raw.size(); i++) {
        unsigned char c = (unsigned char)raw[i];
        if (c >= 0x20 && c < 0x7f) continue;
        char buf[96];
        snprintf(buf, sizeof buf, "it holds %s (byte 0x%02x at position %zu)",
                 c < 0x20 || c == 0x7f ? "a control character" : "a byte that is not ASCII", c, i);
        *why = buf;
        return false;
    }
    return true;
}

// The multiplier for a unit suffix, or 0 when the suffix is not a unit.
uint64_t unit_multiplier(std::string unit) {
    for (char &c : unit) c = (char)tolower((unsigned char)c);
    if (unit.empty() || unit == "b") return 1;
    static const struct {
        const char *names[4];
        int shift;
    } units[] = {
        {{"k", "kb", "kib", "ki"}, 10},
        {{"m", "mb", "mib", "mi"}, 20},
        {{"g", "gb", "gib", "gi"}, 30},
        {{"t", "tb", "tib", "ti"}, 40},
    };
    for (const auto &u : units)
        for (const char *n : u.names)
            if (unit == n) return uint64_t(1) << u.shift;
    return 0;
}

// Whether a unit is an SI spelling: a letter of K, M, G, T followed by B, without the i.
bool si_spelling(std::string unit) {
    for (char &c : unit) c = (char)tolower((unsigned char)c);
    return unit.size() == 2 && unit[1] == 'b' && strchr("kmgt", unit[0]);
}

}  // namespace

const char kUnitRule[] =
    "units are 1024-based, however spelt: B; K, KiB or KB; M, MiB or MB; G, GiB or GB; T, TiB or TB";

std::string si_spelling_note(const std::string &spec) {
    LimitSpec parsed;
    std::string why, note;
    if (!parse_limit_spec(spec, &parsed, &why)) return "";
    size_t start = 0;
    while (start <= spec.size()) {
        size_t comma = spec.find(',', start);
        if (comma == std::string::npos) comma = spec.size();
        std::string item = trim(spec.substr(start, comma - start));
        size_t eq = item.find('=');
        if (eq != std::string::npos) item = trim(item.substr(eq + 1));
        size_t i = 0;
        while (i < item.size() && (isdigit((unsigned char)item[i]) || item[i] == '.')) i++;
        uint64_t bytes = 0;
        if (si_spelling(trim(item.substr(i))) && parse_size(item, &bytes, &why)) {
            if (!note.empty()) note += "; ";
            note += item + " is read as " + human_bytes(bytes) + " (" + std::to_string(bytes) + " bytes)";
        }
        start = comma + 1;
    }
    return note.empty() ? "" : note + ": " + kUnitRule;
}

bool parse_size(const std::string &raw, uint64_t *bytes, std::string *why) {
    if (!printable(raw, why)) return false;
    std::string text = trim(raw);
    if (text.empty()) {
        *why = "empty size";
        return false;
    }
    if (text[0] == '-') {
        *why = "a size cannot be negative";
        return false;
    }
    size_t i = 0;
    while (i < text.size() && (isdigit((unsigned char)text[i]) || text[i] == '.')) i++;
    std::string number = text.substr(0, i), unit = trim(text.substr(i));
    if (number.empty() || number == "." || std::count(number.begin(), number.end(), '.') > 1) {
        *why = "'" + raw + "' is not a size (try 8GiB, 512MiB or a number of bytes)";
        return false;
    }
    uint64_t mult = unit_multiplier(unit);
    if (mult == 0) {
        *why = "unknown unit '" + unit + "' (" + kUnitRule + ")";
        return false;
    }
    if (number.find('.') == std::string::npos) {
        errno = 0;
        char *end = nullptr;
        unsigned long long v = strtoull(number.c_str(), &end, 10);
        if (errno == ERANGE || (mult > 1 && v > std::numeric_limits<uint64_t>::max() / mult)) {
            *why = "'" + raw + "' is too large";
            return false;
        }
        *bytes = (uint64_t)v * mult;
        return true;
    }
    double v = strtod(number.c_str(), nullptr);
    long double b = (long double)v * (long double)mult;
    if (!(b < 18446744073709551615.0L)) {
        *why = "'" + raw + "' is too large";
        return false;
    }
    *bytes = (uint64_t)llroundl(b);
    return true;
}

uint64_t Limit::resolve(uint64_t physical_total) const {
    switch (kind) {
        case kBytes: return bytes;
        case kPercent: return (uint64_t)((long double)physical_total * percent / 100.0L);
        case kNone: break;
    }
    return UINT64_MAX;
}

std::string Limit::str() const {
    char buf[64];
    switch (kind) {
        case kBytes: return human_bytes(bytes);
        case kPercent: snprintf(buf, sizeof buf, "%g%%", percent); return buf;
        case kNone: break;
    }
    return "none";
}

bool parse_limit(const std::string &raw, Limit *out, std::string *why) {
    if (!printable(raw, why)) return false;
    std::string text = trim(raw);
    if (!text.empty() && text.back() == '%') {
        std::string num = trim(text.substr(0, text.size() - 1));
        char *end = nullptr;
        double p = num.empty() ? NAN : strtod(num.c_str(), &end);
        if (num.empty() || *end != '\0' || !(p > 0) || p > 100) {
            *why = "'" + raw + "' is not a percentage between 0 and 100";
            return false;
        }
        out->kind = Limit::kPercent;
        out->percent = p;
        return true;
    }
    uint64_t b = 0;
    if (!parse_size(text, &b, why)) return false;
    if (b == 0) {
        *why = "a limit of 0 bytes would refuse everything (unset the variable for no limit)";
        return false;
    }
    out->kind = Limit::kBytes;
    out->bytes = b;
    return true;
}

bool parse_limit_spec(const std::string &raw, LimitSpec *out, std::string *why) {
    LimitSpec spec;
    if (!printable(raw, why)) return false;
    if (raw.size() > kMaxLimitSpecLength) {
        *why = "it is " + std::to_string(raw.size()) + " characters long, more than the " +
               std::to_string(kMaxLimitSpecLength) + " a ledger holds";
        return false;
    }
    std::string text = trim(raw);
    if (text.empty()) {
        *why = "empty limit";
        return false;
    }
    size_t start = 0;
    while (start <= text.size()) {
        size_t comma = text.find(',', start);
        if (comma == std::string::npos) comma = text.size();
        std::string item = trim(text.substr(start, comma - start));
        start = comma + 1;
        if (item.empty()) {
            *why = "empty entry in '" + raw + "'";
            return false;
        }
        size_t eq = item.find('=');
        if (eq == std::string::npos) {
            if (spec.all.kind != Limit::kNone) {
                *why = "two default limits in '" + raw + "'";
                return false;
            }
            if (!parse_limit(item, &spec.all, why)) return false;
            continue;
        }
        LimitSpec::Entry e;
        e.key = trim(item.substr(0, eq));
        std::string value = trim(item.substr(eq + 1));
        bool ordinal = !e.key.empty() && std::all_of(e.key.begin(), e.key.end(), ::isdigit);
        bool uuid = e.key.size() > 4 && strncasecmp(e.key.c_str(), "GPU-", 4) == 0 &&
                    std::all_of(e.key.begin() + 4, e.key.end(),
                                [](char c) { return isxdigit((unsigned char)c) || c == '-'; }) &&
                    std::any_of(e.key.begin() + 4, e.key.end(), ::isxdigit);
        if (!ordinal && !uuid) {
            *why = "'" + e.key + "' is not a device (use an ordinal like 0 or a UUID like GPU-5e1d..., hex digits)";
            return false;
        }
        if (ordinal) {  // a number: "00" and "0" are the same device
            size_t z = e.key.find_first_not_of('0');
            e.key = z == std::string::npos ? "0" : e.key.substr(z);
        } else {  // the driver's spelling: "GPU-" and lower-case hex
            e.key = "GPU-" + e.key.substr(4);
            for (size_t i = 4; i < e.key.size(); i++) e.key[i] = (char)tolower((unsigned char)e.key[i]);
        }
        if (value.empty()) {
            *why = "no limit after '" + e.key + "='";
            return false;
        }
        if (!parse_limit(value, &e.limit, why)) return false;
        for (const auto &other : spec.per_device)
            if (other.key == e.key) {
                *why = "device " + e.key + " is given twice";
                return false;
            }
        spec.per_device.push_back(e);
        if (comma == text.size()) break;
    }
    *out = spec;
    return true;
}

std::vector<std::string> unmatched_entries(const LimitSpec &spec, const std::vector<std::string> &uuids) {
    std::vector<std::string> out;
    for (const LimitSpec::Entry &e : spec.per_device) {
        bool selects = false;
        for (size_t i = 0; i < uuids.size() && !selects; i++) {
            if (e.key.rfind("GPU-", 0) == 0) selects = uuids[i].rfind(e.key, 0) == 0;
            else selects = std::to_string(i) == e.key;
        }
        if (!selects) out.push_back(e.key + "=" + e.limit.str());
    }
    return out;
}

Limit LimitSpec::for_device(int ordinal, const std::string &uuid) const {
    for (const Entry &e : per_device) {
        if (e.key.rfind("GPU-", 0) == 0) {
            if (!uuid.empty() && uuid.rfind(e.key, 0) == 0) return e.limit;
        } else if (std::to_string(ordinal) == e.key) {
            return e.limit;
        }
    }
    return all;
}

}  // namespace gg
