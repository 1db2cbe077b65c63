// A JSON document written as it is made, to a file through one 64 KiB buffer (or to a string, for
// build() and the tests): a report's memory is then that of its largest row, not of the report, where
// the tensor view lists up to 218,000 events (issue 29). The text is nlohmann::json's dump(1, ' ')
// of the same document, key for key; each value given whole is dumped so and indented to its place.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gg::report {

class JsonOut {
public:
    // Into the open descriptor `fd` (not closed here), or into *text.
    explicit JsonOut(int fd);
    explicit JsonOut(std::string *text);

    // An object or an array, as a member of the object being written (key) or an element of the
    // array being written (key null), or as the document.
    void begin_object(const char *key = nullptr);
    void end_object();
    void begin_array(const char *key = nullptr);
    void end_array();
    // A value given whole (a small one: a row, a section of a few fields).
    void value(const char *key, const nlohmann::json &v);
    void item(const nlohmann::json &v) { value(nullptr, v); }

    // Writes what the buffer holds. False when anything failed: a write (why() says why: a full
    // disk, say), or a document past report_limits::kMaxReportBytes, which the reader would refuse;
    // after a failure nothing more is written.
    bool finish();
    const std::string &why() const { return why_; }

private:
    void open(const char *key, char bracket);
    void close(char bracket);
    void next_member(const char *key);
    void put(const std::string &s);
    void flush();

    int fd_ = -1;
    std::string *text_ = nullptr;
    std::string buffer_;
    size_t written_ = 0;
    std::vector<bool> empty_;  // per open object or array: no member written yet
    std::string why_;
};

}  // namespace gg::report
