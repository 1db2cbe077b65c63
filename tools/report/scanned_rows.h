// A report's arrays of rows read by a scanner of their own layout, before nlohmann_json parses the rest.
// A 64 MiB report is almost all rows of a few plain numbers and short strings; nlohmann's lexer, made
// for any JSON, took about half a second of CPU to read them. The scanner reads a row's numbers and
// plain strings itself and hands each row to its reader (the same RowArray readers the SAX handler of
// streamed_rows.h feeds); nlohmann then parses the rest of the text, each array of rows written `[]`,
// into the document, which so holds each row array empty, as StreamedRows leaves it.
//
// The scanner reads only what it can read exactly as nlohmann would: a number with a fraction, an
// exponent or too many digits, and a string with an escape or a byte past ASCII, are given to
// nlohmann's own parser one at a time. Anything else it does not read (a row holding an array or an
// object, a row array holding an object, text nested deeper than the reader's limit, brackets that do
// not pair) makes scan() return false, and the caller parses the whole text with StreamedRows as
// before: the same model, the same refusal of a broken file, at nlohmann's speed.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "tools/report/streamed_rows.h"

namespace gg::report {

// A string's end in JSON text: the index after its closing quote, `open` being that of its opening
// one; npos when the text ends first.
inline size_t json_string_end(std::string_view text, size_t open) {
    size_t i = open + 1;
    while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
    return i < text.size() ? i + 1 : std::string_view::npos;
}

// The key a quoted string spells, its escapes decoded as nlohmann decodes them; false when they are
// not JSON's.
inline bool json_key(std::string_view quoted, std::string &key) {
    if (quoted.find('\\') == std::string_view::npos) {
        key.assign(quoted.substr(1, quoted.size() - 2));
        return true;
    }
    json k = json::parse(quoted, nullptr, /*allow_exceptions=*/false);
    if (!k.is_string()) return false;
    key = k.get<std::string>();
    return true;
}

class RowScanner {
public:
    RowScanner(std::string_view text, std::vector<RowArray> arrays) : text_(text), arrays_(std::move(arrays)) {
        for (const RowArray &a : arrays_) deepest_path_ = std::max(deepest_path_, a.path.size());
    }

    // Reads every array of rows (each a RowArray's path from the root through objects) into its reader,
    // restarting it where a later one replaces it, and writes into `rest` the text with each written
    // `[]`. False when the text holds what the scanner does not read (above): the readers may then hold
    // part of the rows.
    bool scan(int max_depth, std::string &rest) {
        size_t copied = 0;  // the text before it is in `rest`
        for (size_t i = 0; i < text_.size(); i++) {
            const char c = text_[i];
            if (c == '"') {
                size_t end = json_string_end(text_, i);
                if (end == std::string_view::npos || !note_key(i, end)) return false;
                i = end - 1;
            } else if (c == '{' || c == '[') {
                if (open_.size() + 1 > size_t(max_depth)) return false;
                if (const RowArray *a = c == '[' ? array_here() : nullptr) {
                    size_t at = i;
                    if (!read_rows(*a, i, max_depth)) return false;
                    rest.append(text_.substr(copied, at - copied)).append("[]");
                    copied = i;
                    i--;  // the loop steps past the array's end
                    continue;
                }
                if (c == '{' && open_.size() == keys_.size() && open_.size() < deepest_path_) keys_.emplace_back();
                open_.push_back(c);
            } else if (c == '}' || c == ']') {
                if (open_.empty() || open_.back() != (c == '}' ? '{' : '[')) return false;
                if (open_.size() == keys_.size()) keys_.pop_back();
                open_.pop_back();
            }
        }
        if (!open_.empty()) return false;
        rest.append(text_.substr(copied));
        return true;
    }

private:
    // A string followed by ':' in an object whose place is followed (every container open is an object,
    // within the deepest path) is that object's key from here on.
    bool note_key(size_t open, size_t end) {
        if (keys_.empty() || open_.size() != keys_.size()) return true;
        size_t colon = text_.find_first_not_of(" \t\r\n", end);
        if (colon == std::string_view::npos || text_[colon] != ':') return true;
        return json_key(text_.substr(open, end - open), keys_.back());
    }

    const RowArray *array_here() const {
        if (open_.size() != keys_.size()) return nullptr;
        for (const RowArray &a : arrays_) {
            if (a.path.size() != keys_.size()) continue;
            bool same = true;
            for (size_t k = 0; k < keys_.size() && same; k++) same = keys_[k] == a.path[k];
            if (same) return &a;
        }
        return nullptr;
    }

    char peek(size_t i) const { return i < text_.size() ? text_[i] : '\0'; }
    size_t skip_space(size_t i) const {
        while (i < text_.size() && (text_[i] == ' ' || text_[i] == '\t' || text_[i] == '\n' || text_[i] == '\r')) i++;
        return i;
    }

    // The array of rows at text_[i] == '[', read to its end; `i` then indexes the byte after it. An
    // element that is no row is read and left out, as every row reader leaves it.
    bool read_rows(const RowArray &a, size_t &i, int max_depth) {
        a.restart(a.reader);
        i = skip_space(i + 1);
        if (peek(i) == ']') return ++i, true;
        if (open_.size() + 2 > size_t(max_depth)) return false;  // a row is one level deeper
        for (;;) {
            i = skip_space(i);
            if (peek(i) == '[') {
                if (!read_row(i)) return false;
                a.row(a.reader, row_);
            } else if (!read_value(i, scratch_)) {
                return false;
            }
            i = skip_space(i);
            if (peek(i) == ']') return ++i, true;
            if (peek(i) != ',') return false;
            i++;
        }
    }

    bool read_row(size_t &i) {
        row_.clear();
        i = skip_space(i + 1);
        if (peek(i) == ']') return ++i, true;
        for (;;) {
            i = skip_space(i);
            if (!read_value(i, row_.add(Cell::kOther))) return false;
            i = skip_space(i);
            if (peek(i) == ']') return ++i, true;
            if (peek(i) != ',') return false;
            i++;
        }
    }

    // A scalar at text_[i] into `cell` (kOther for true, false and null); `i` then indexes the byte
    // after it. An array or an object is not read.
    bool read_value(size_t &i, Cell &cell) {
        const char c = peek(i);
        if (c == '"') return read_string(i, cell);
        if (c == '-' || (c >= '0' && c <= '9')) return read_number(i, cell);
        for (std::string_view word : {"true", "false", "null"}) {
            if (text_.substr(i, word.size()) == word) {
                cell.kind = Cell::kOther;
                i += word.size();
                return true;
            }
        }
        return false;
    }

    bool read_string(size_t &i, Cell &cell) {
        const size_t end = json_string_end(text_, i);
        if (end == std::string_view::npos) return false;
        std::string_view inner = text_.substr(i + 1, end - i - 2);
        bool plain = true;  // printable ASCII, no escape: the string is its bytes
        for (char ch : inner) plain = plain && ch >= 0x20 && ch < 0x7f && ch != '\\';
        cell.kind = Cell::kString;
        if (plain) cell.s.assign(inner);
        else if (!by_nlohmann(text_.substr(i, end - i), cell)) return false;
        i = end;
        return true;
    }

    // Up to 19 digits fit in uint64_t, 18 after a minus sign in int64_t, as nlohmann reads them
    // (non-negative integers unsigned, negative ones signed); a leading zero before a digit is no JSON.
    bool read_number(size_t &i, Cell &cell) {
        size_t end = i;
        while (end < text_.size() && number_char(text_[end])) end++;
        std::string_view token = text_.substr(i, end - i);
        const bool negative = token[0] == '-';
        std::string_view digits = token.substr(negative ? 1 : 0);
        bool plain =
            !digits.empty() && digits.size() <= (negative ? 18u : 19u) && !(digits[0] == '0' && digits.size() > 1);
        uint64_t v = 0;
        for (size_t k = 0; k < digits.size() && plain; k++) {
            plain = digits[k] >= '0' && digits[k] <= '9';
            v = v * 10 + uint64_t(digits[k] - '0');
        }
        if (!plain) {
            if (!by_nlohmann(token, cell)) return false;
        } else if (negative) {
            cell.kind = Cell::kSigned;
            cell.i = -int64_t(v);
        } else {
            cell.kind = Cell::kUnsigned;
            cell.u = v;
        }
        i = end;
        return true;
    }
    static bool number_char(char c) {
        return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
    }

    // One value the scanner does not decode itself, read by nlohmann as its parser reads it in place.
    static bool by_nlohmann(std::string_view token, Cell &cell) {
        json v = json::parse(token, nullptr, /*allow_exceptions=*/false);
        if (v.is_string()) cell.s = v.get<std::string>(), cell.kind = Cell::kString;
        else if (v.is_number_unsigned()) cell.u = v.get<uint64_t>(), cell.kind = Cell::kUnsigned;
        else if (v.is_number_integer()) cell.i = v.get<int64_t>(), cell.kind = Cell::kSigned;
        else if (v.is_number_float()) cell.f = v.get<double>(), cell.kind = Cell::kFloat;
        else return false;  // not JSON (discarded), or not the scalar the token looked like
        return true;
    }

    std::string_view text_;
    std::vector<RowArray> arrays_;
    size_t deepest_path_ = 0;
    std::vector<char> open_;         // the open containers outside the arrays of rows: '{' or '['
    std::vector<std::string> keys_;  // the key of each open object, while every open container is one
    Row row_;
    Cell scratch_;  // an element of a row array that is no row
};

}  // namespace gg::report
