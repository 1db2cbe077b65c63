#include "shim/report/json_out.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

#include "common/report/limits.h"

namespace gg::report {
namespace {

constexpr size_t kBufferBytes = size_t(64) << 10;

// nlohmann's dump of one value, invalid UTF-8 replaced (a command line in Latin-1 is not fatal: the
// report is needed most when something is already wrong), at `depth` spaces of indentation.
std::string dumped(const nlohmann::json &v, size_t depth) {
    std::string text = v.dump(1, ' ', false, nlohmann::json::error_handler_t::replace), out;
    out.reserve(text.size());
    // A dump's newlines are its own: strings have theirs escaped.
    for (char c : text) {
        out += c;
        if (c == '\n') out.append(depth, ' ');
    }
    return out;
}

}  // namespace

JsonOut::JsonOut(int fd) : fd_(fd) { buffer_.reserve(kBufferBytes); }
JsonOut::JsonOut(std::string *text) : text_(text) {}

void JsonOut::next_member(const char *key) {
    if (!empty_.empty()) {
        put(empty_.back() ? "\n" : ",\n");
        empty_.back() = false;
        put(std::string(empty_.size(), ' '));
    }
    if (key) put(dumped(nlohmann::json(key), 0) + ": ");
}

void JsonOut::open(const char *key, char bracket) {
    next_member(key);
    put(std::string(1, bracket));
    empty_.push_back(true);
}

void JsonOut::close(char bracket) {
    bool was_empty = empty_.back();
    empty_.pop_back();
    if (!was_empty) put("\n" + std::string(empty_.size(), ' '));
    put(std::string(1, bracket));
}

void JsonOut::begin_object(const char *key) { open(key, '{'); }
void JsonOut::end_object() { close('}'); }
void JsonOut::begin_array(const char *key) { open(key, '['); }
void JsonOut::end_array() { close(']'); }

void JsonOut::value(const char *key, const nlohmann::json &v) {
    next_member(key);
    put(dumped(v, empty_.size()));
}

void JsonOut::put(const std::string &s) {
    if (!why_.empty()) return;
    if (written_ + s.size() > report_limits::kMaxReportBytes) {
        why_ = "it would pass the " + std::to_string(report_limits::kMaxReportBytes >> 20) +
               " MiB that gpuguard report reads";
        return;
    }
    written_ += s.size();
    if (text_) {
        text_->append(s);
        return;
    }
    if (buffer_.size() + s.size() > kBufferBytes) flush();
    if (s.size() >= kBufferBytes) {  // a row larger than the buffer goes straight out
        buffer_ = s;
        flush();
        return;
    }
    buffer_ += s;
}

void JsonOut::flush() {
    size_t off = 0;
    while (why_.empty() && off < buffer_.size()) {
        ssize_t n = ::write(fd_, buffer_.data() + off, buffer_.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) why_ = n < 0 ? strerror(errno) : "short write";
        else off += (size_t)n;
    }
    buffer_.clear();
}

bool JsonOut::finish() {
    if (fd_ >= 0) flush();
    return why_.empty();
}

}  // namespace gg::report
