// A report's JSON parsed into a document, except its arrays of rows (the tensor view's events, blocks,
// segments...), whose rows are handed to a reader one at a time as they are parsed. A 64 MiB report is
// almost all rows: held as JSON values they took most of the reader's time and memory (nlohmann_json's
// document of 1.3 million event rows, then the model made from it), read as they pass they take
// neither. The document keeps the rows too only when asked (Keep::kDocument); --html copies them from
// the file's text instead (Keep::kText).
//
// The document is what json::parse makes (the same builder, nlohmann's json_sax_dom_parser), so a
// later key replaces an earlier one of the same name; an array of rows replaced so is read again from
// the start (RowArray::restart), and the caller takes the rows only where the document still holds an
// array at that place (the last one read: every array there is read).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tools/report/model.h"

namespace gg::report {

// One value of a row, as JSON gave it: nlohmann's number kinds (non-negative integers are unsigned,
// negative ones signed), a string, or anything else (null, a boolean, a nested array or object).
struct Cell {
    enum Kind : uint8_t { kOther, kUnsigned, kSigned, kFloat, kString };
    Kind kind = kOther;
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;
    std::string s;  // kString; its capacity is kept from row to row

    bool is_number() const { return kind == kUnsigned || kind == kSigned || kind == kFloat; }
    double as_double() const { return kind == kUnsigned ? double(u) : kind == kSigned ? double(i) : f; }
};

// A row: the values of one array element of a row array. A row that is not an array is never handed
// to a reader (every reader leaves such rows out).
class Row {
public:
    size_t size() const { return size_; }
    const Cell &operator[](size_t i) const { return cells_[i]; }

    void clear() { size_ = 0; }
    Cell &add(Cell::Kind kind) {
        if (size_ == cells_.size()) cells_.emplace_back();
        Cell &c = cells_[size_++];
        c.kind = kind;
        return c;
    }

private:
    std::vector<Cell> cells_;  // kept from row to row, so that a row allocates nothing
    size_t size_ = 0;
};

// What reads the rows of one array: `restart` when an array begins at its place, `row` for each of its
// array elements in order.
struct RowArray {
    std::vector<const char *> path;  // the keys from the document's root, through objects only
    void *reader = nullptr;
    void (*restart)(void *reader) = nullptr;
    void (*row)(void *reader, const Row &row) = nullptr;
};

// The SAX handler of json::sax_parse: builds the document through nlohmann's own builder, and hands
// the rows of the arrays at `arrays`' paths to their readers. Without `keep_rows`, such an array stays
// in the document empty.
class StreamedRows {
public:
    using number_integer_t = json::number_integer_t;
    using number_unsigned_t = json::number_unsigned_t;
    using number_float_t = json::number_float_t;
    using string_t = json::string_t;
    using binary_t = json::binary_t;

    StreamedRows(json &document, std::vector<RowArray> arrays, bool keep_rows)
        : dom_(document, /*allow_exceptions=*/false), arrays_(std::move(arrays)), keep_rows_(keep_rows) {}

    bool null() {
        cell(Cell::kOther);
        return !to_dom() || dom_.null();
    }
    bool boolean(bool v) {
        cell(Cell::kOther);
        return !to_dom() || dom_.boolean(v);
    }
    bool number_integer(number_integer_t v) {
        if (Cell *c = cell(Cell::kSigned)) c->i = v;
        return !to_dom() || dom_.number_integer(v);
    }
    bool number_unsigned(number_unsigned_t v) {
        if (Cell *c = cell(Cell::kUnsigned)) c->u = v;
        return !to_dom() || dom_.number_unsigned(v);
    }
    bool number_float(number_float_t v, const string_t &text) {
        if (Cell *c = cell(Cell::kFloat)) c->f = v;
        return !to_dom() || dom_.number_float(v, text);
    }
    bool string(string_t &v) {
        if (Cell *c = cell(Cell::kString)) c->s.assign(v);
        return !to_dom() || dom_.string(v);
    }
    bool binary(binary_t &v) { return dom_.binary(v); }  // JSON text has none

    bool start_object(std::size_t n) {
        if (streaming_) nested_open(false);
        else levels_.push_back({true, {}});
        return !to_dom() || dom_.start_object(n);
    }
    bool key(string_t &k) {
        if (!streaming_) levels_.back().key = k;
        return !to_dom() || dom_.key(k);
    }
    bool end_object() {
        bool to = to_dom();
        if (streaming_) nested_close();
        else levels_.pop_back();
        return !to || dom_.end_object();
    }
    bool start_array(std::size_t n) {
        if (streaming_) {
            nested_open(true);
            return !to_dom() || dom_.start_array(n);
        }
        levels_.push_back({false, {}});
        if ((streaming_ = array_here())) {
            depth_ = 0;
            streaming_->restart(streaming_->reader);
        }
        return dom_.start_array(n);  // a row array itself stays in the document, empty or whole
    }
    bool end_array() {
        if (streaming_ && depth_ == 0) {  // the row array ends
            streaming_ = nullptr;
            levels_.pop_back();
            return dom_.end_array();
        }
        bool to = to_dom();
        if (streaming_) nested_close();
        else levels_.pop_back();
        return !to || dom_.end_array();
    }
    bool parse_error(std::size_t at, const std::string &token, const nlohmann::detail::exception &e) {
        return dom_.parse_error(at, token, e);
    }

private:
    struct Level {
        bool object;
        std::string key;  // the last key read in it (objects only)
    };

    // Inside a row array, values go to the document only when its rows are kept.
    bool to_dom() const { return !streaming_ || keep_rows_; }

    // The row array whose path the open containers spell, if any.
    const RowArray *array_here() const {
        for (const RowArray &a : arrays_) {
            if (a.path.size() + 1 != levels_.size()) continue;
            bool same = true;
            for (size_t i = 0; i < a.path.size() && same; i++) same = levels_[i].object && levels_[i].key == a.path[i];
            if (same) return &a;
        }
        return nullptr;
    }

    // depth_: 0 between rows, 1 inside a row (its values are cells), 2 and more inside a cell.
    void nested_open(bool array) {
        if (depth_ == 0) {
            row_.clear();
            in_array_row_ = array;
        } else if (depth_ == 1 && in_array_row_) {
            row_.add(Cell::kOther);
        }
        depth_++;
    }
    void nested_close() {
        if (--depth_ == 0 && in_array_row_) streaming_->row(streaming_->reader, row_);
    }

    // A row's value: a cell when it is one of the row's own values (not nested deeper).
    Cell *cell(Cell::Kind kind) { return streaming_ && depth_ == 1 && in_array_row_ ? &row_.add(kind) : nullptr; }

    nlohmann::detail::json_sax_dom_parser<json> dom_;
    std::vector<RowArray> arrays_;
    bool keep_rows_;
    std::vector<Level> levels_;  // the open containers outside any row array
    const RowArray *streaming_ = nullptr;
    int depth_ = 0;
    bool in_array_row_ = false;  // the element being read is an array (a row)
    Row row_;
};

}  // namespace gg::report
