// Folders and paths as the command needs them: made on demand, made absolute, checked writable.
#pragma once
#include <string>

namespace gg::tool {

// mkdir -p. False with *why ("cannot create DIR: reason").
bool make_dirs(const std::string &dir, std::string *why);
std::string absolute_path(const std::string &path);
// The folder part of a path: "." for a bare name, "/" for a file at the root.
std::string dirname_of(const std::string &path);
// Whether a file can be created in `dir` (tries one, then removes it). False with *why.
bool dir_writable(const std::string &dir, std::string *why);

}  // namespace gg::tool
