// Text for a terminal: widths counted in code points, padding, clipping with "…", wrapping at a
// width, and Markdown (the settings table's help) turned into plain words.
#pragma once
#include <cstddef>
#include <string>

namespace gg::tool {

size_t display_width(const std::string &s);  // code points, not bytes
std::string pad_right(const std::string &s, size_t width);
std::string pad_left(const std::string &s, size_t width);
// Cut to `width` code points, marking the cut with "…".
std::string clip(const std::string &s, size_t width);
// Words of `text` wrapped at `width` columns, every line after the first starting with `indent`; a
// size's unit stays on its number's line ("4.50 GiB" never splits).
std::string wrap(const std::string &text, size_t width, const std::string &indent);
// Words of `text` in lines of `width - indent` columns, every line after the first starting with
// `indent` spaces: for text that follows a label of `indent` columns on the first line.
std::string wrap_hanging(const std::string &text, size_t width, size_t indent);
// `text` ending with a full stop.
std::string sentence(const std::string &text);
// `code` -> code, [text](link) -> text.
std::string plain_text(const std::string &markdown);

}  // namespace gg::tool
