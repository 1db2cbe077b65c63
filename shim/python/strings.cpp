#include "shim/python/strings.h"

#include <cstdlib>
#include <cstring>

#include "common/base/log.h"
#include "shim/python/layout.h"

namespace gg::py {
namespace {

size_t put_utf8(uint32_t c, char *out) {
    if (c >= 0xD800 && c <= 0xDFFF) c = '?';  // a lone surrogate (e.g. from surrogateescape)
    if (c < 0x80) {
        out[0] = char(c);
        return 1;
    }
    if (c < 0x800) {
        out[0] = char(0xC0 | c >> 6);
        out[1] = char(0x80 | (c & 63));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = char(0xE0 | c >> 12);
        out[1] = char(0x80 | ((c >> 6) & 63));
        out[2] = char(0x80 | (c & 63));
        return 3;
    }
    if (c > 0x10FFFF) c = 0xFFFD;
    out[0] = char(0xF0 | c >> 18);
    out[1] = char(0x80 | ((c >> 12) & 63));
    out[2] = char(0x80 | ((c >> 6) & 63));
    out[3] = char(0x80 | (c & 63));
    return 4;
}

}  // namespace

long read_str(const Layout &l, uintptr_t obj, uintptr_t str_type, char (&buf)[kMaxName * 4]) {
    if (!plausible(obj) || at<uintptr_t>(obj, kObType) != str_type) return -1;
    int64_t length = at<int64_t>(obj, kStrLength);
    uint32_t state = at<uint32_t>(obj, kStrState);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    // Names and file names in code objects are always compact; a legacy (non-compact) str keeps
    // its data behind one more pointer and is not worth the extra risk.
    if (!compact || length < 0) return -1;
    size_t n = size_t(length) < kMaxName ? size_t(length) : kMaxName;
    if (ascii) {
        std::memcpy(buf, reinterpret_cast<const void *>(obj + l.ascii_size), n);
        return long(n);
    }
    const void *data = reinterpret_cast<const void *>(obj + l.compact_size);
    size_t out = 0;
    for (size_t i = 0; i < n; ++i) {
        uint32_t c;
        if (kind == 1) c = static_cast<const uint8_t *>(data)[i];
        else if (kind == 2) c = static_cast<const uint16_t *>(data)[i];
        else if (kind == 4) c = static_cast<const uint32_t *>(data)[i];
        else return -1;
        out += put_utf8(c, buf + out);
    }
    return long(out);
}

bool ascii_equals(const Layout &l, uintptr_t obj, uintptr_t str_type, std::string_view text) {
    if (!plausible(obj) || at<uintptr_t>(obj, kObType) != str_type) return false;
    uint32_t state = at<uint32_t>(obj, kStrState);
    if (!((state >> 5) & 1) || !((state >> 6) & 1)) return false;  // not compact, or not ASCII
    return at<int64_t>(obj, kStrLength) == int64_t(text.size()) &&
           !std::memcmp(reinterpret_cast<const void *>(obj + l.ascii_size), text.data(), text.size());
}

Interner::~Interner() {
    for (std::string_view s : set_) std::free(const_cast<char *>(s.data()));
}

const char *Interner::intern(std::string_view s) {
    auto it = set_.find(s);
    if (it != set_.end()) return it->data();
    if (bytes_ + s.size() + 1 > kMaxBytes) {
        static bool told = false;
        if (!told) log_debug("python frames: %zu bytes of names interned; further names read <?>", bytes_);
        told = true;
        return "<?>";
    }
    char *copy = static_cast<char *>(std::malloc(s.size() + 1));
    if (!copy) return "<?>";
    std::memcpy(copy, s.data(), s.size());
    copy[s.size()] = '\0';
    bytes_ += s.size() + 1;
    set_.insert(std::string_view(copy, s.size()));
    return copy;
}

}  // namespace gg::py
