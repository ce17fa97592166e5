// Writing a whole output file (a run's summary, a trace, an exported checkpoint)
// without losing what was there: the checks an output path gets before a run
// spends its time, and the write itself.
#pragma once

#include <functional>
#include <string>

namespace dtrain {

// Checks, before the work that produces it, that `path` can take a file: not a
// directory, its directory there or made now. IoError "<what>: ..." otherwise.
void prepare_output_file(const std::string& path, const std::string& what);

// Writes `path` by calling write(p) with the path to write: a regular file (or a
// new one) through a temporary file beside it and a rename, so an existing file
// is never left half-written; through a symbolic link, its target the same way
// (the link stays); a device or FIFO (/dev/stdout) directly. IoError naming
// `what` when `path` is a directory or the rename fails; `write` throws its own.
void write_output_file(const std::string& path, const std::string& what,
                       const std::function<void(const std::string&)>& write);

// write_output_file() of `text` (a summary's or a trace's JSON).
void write_text_file(const std::string& path, const std::string& what, const std::string& text);

}  // namespace dtrain
