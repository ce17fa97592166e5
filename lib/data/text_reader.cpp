// The text reader: UTF-8 files as one byte-level token corpus, cut into windows
// for a language model (`format: text`).
//
// The files (globs expanded, then those named by `exclude` left out) are read as
// bytes, concatenated in order; each byte is a token (vocabulary 256). The corpus
// is cut into windows as windows.h describes (sequence_length, stride,
// validation_split, subset); the bytes are held once (Dataset::corpus), so a
// stride of 1 costs no more memory than the text.
// A file that is not UTF-8, holds a NUL byte (a binary file, such as a fortune
// .dat index) or is the same file as an earlier one (a symlink: fortune's .u8
// files) is an IoError naming it and how to leave it out.
// Its registry entry (dataset.h's DataFormat: keys, reader, loaders) closes the file.
#include <fnmatch.h>
#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <utility>

#include "core/error.h"
#include "core/strings.h"
#include "data/byte_file.h"
#include "data/readers.h"
#include "data/windows.h"

namespace dtrain::data::detail {

constexpr TokenUnit kBytes{"byte", "bytes", "more text"};

namespace {

constexpr const char* kMissingHint = "fix the path, or the pattern in files";

void check_fields(const DataSourceSpec& spec) {
  if (spec.files.empty())
    throw ConfigError(str(spec.path, ".files: missing or empty: a text source needs its files, e.g. "
                                     "[\"/usr/share/games/fortunes/*\"]"));
  check_window_fields(spec);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A pattern for `exclude` that leaves out `file`: "*.u8" for "art.u8", else its name.
std::string exclude_pattern(const std::string& file) {
  const std::string name = base_name(file);
  const size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? name : str("*", name.substr(dot));
}

// spec.files with globs expanded, less the excluded names. A file listed again
// under another name (a link to an earlier one) would repeat its text: an IoError.
std::vector<std::string> text_files(const DataSourceSpec& spec) {
  std::vector<std::string> files;
  std::map<std::pair<dev_t, ino_t>, std::string> first_name;  // (device, inode) -> the name it was listed under
  for (const std::string& file : expand_files(spec)) {
    bool excluded = false;
    for (const std::string& pattern : spec.exclude)
      excluded = excluded || ::fnmatch(pattern.c_str(), base_name(file).c_str(), 0) == 0;
    if (excluded) continue;
    struct stat st {};
    if (::stat(file.c_str(), &st) == 0) {  // (a missing file: ByteFile names it)
      const auto [it, added] = first_name.emplace(std::make_pair(st.st_dev, st.st_ino), file);
      if (!added)
        throw IoError(str(spec.path, ".files: '", file, "' is the same file as '", it->second,
                          "' (a link to it): its text would be read twice; leave one out with ", spec.path,
                          ".exclude, e.g. [\"", exclude_pattern(file), "\"]"));
    }
    files.push_back(file);
  }
  if (files.empty())
    throw IoError(str(spec.path, ".exclude: leaves out every file that ", spec.path,
                      ".files matched; fix the patterns"));
  return files;
}

// The offset of the first byte of text[0, n) that is not part of valid UTF-8, or a
// NUL; n when there is none.
size_t first_non_text(const uint8_t* text, size_t n) {
  size_t i = 0;
  while (i < n) {
    const uint8_t b = text[i];
    if (b == 0) return i;
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t more = 0;
    uint32_t code = 0;
    if ((b & 0xe0) == 0xc0) more = 1, code = b & 0x1f;
    else if ((b & 0xf0) == 0xe0) more = 2, code = b & 0x0f;
    else if ((b & 0xf8) == 0xf0) more = 3, code = b & 0x07;
    else return i;
    if (i + more >= n) return i;  // cut short by the end of the file
    for (size_t k = 1; k <= more; ++k) {
      if ((text[i + k] & 0xc0) != 0x80) return i;
      code = (code << 6) | (text[i + k] & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[more] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return i;
    i += more + 1;
  }
  return n;
}

// The whole corpus: every file's bytes, in order, each checked to be text.
std::vector<uint8_t> read_corpus(const DataSourceSpec& spec) {
  std::vector<uint8_t> bytes;
  for (const std::string& file : text_files(spec)) {
    ByteFile in(file, str(spec.path, ".files"), kMissingHint);
    const size_t start = bytes.size();
    in.read_payload(ByteFile::kToEnd, &bytes);
    const size_t bad = first_non_text(bytes.data() + start, bytes.size() - start);
    if (bad < bytes.size() - start) {
      char code[8];
      std::snprintf(code, sizeof code, "0x%02x", bytes[start + bad]);
      in.fail(str(bytes[start + bad] == 0 ? "holds a NUL byte" : "is not UTF-8 text", " at byte ", bad, " (", code,
                  "): is it a binary file (a fortune .dat index)? Leave it out with ", spec.path,
                  ".exclude, e.g. [\"", exclude_pattern(file), "\"], or convert it to UTF-8 (iconv -t utf-8)"));
    }
  }
  return bytes;
}

WindowRange part_of(const DataSourceSpec& spec, int64_t total) {
  if (total == 0)
    throw IoError(str(spec.path, ".files: the corpus is empty (every file matched has 0 bytes); give files that "
                                 "hold text"));
  return window_range(spec, total, kBytes);
}

}  // namespace

Dataset load_text(const DataSourceSpec& spec) {
  check_fields(spec);
  std::vector<uint8_t> bytes = read_corpus(spec);
  const WindowRange range = part_of(spec, static_cast<int64_t>(bytes.size()));
  return windowed_dataset(spec, range, std::move(bytes));
}

DatasetInfo probe_text(const DataSourceSpec& spec) {
  check_fields(spec);
  int64_t total = 0;
  for (const std::string& file : text_files(spec)) {
    ByteFile in(file, str(spec.path, ".files"), kMissingHint);
    total += static_cast<int64_t>(in.read_payload(ByteFile::kToEnd, nullptr).got);
  }
  return windowed_info(spec, part_of(spec, total));
}

}  // namespace dtrain::data::detail

namespace dtrain::data {

// The registry entry (dataset.h): keys, reader, loaders.
const DataFormat& text_format() {
  static const DataFormat format{
      "text",
      "UTF-8 text files as byte tokens (vocabulary 256), concatenated in order, cut into windows for a language "
      "model: a sample is `sequence_length` tokens (as floats), its labels the next token at each position",
      [] {
        std::vector<config::KeyDoc> keys = {
            {"files", "paths or glob patterns, in order (required, e.g. `/usr/share/games/fortunes/*`)"},
            {"exclude", "`[]`: glob patterns of file names (without the directory) to leave out, e.g. `[\"*.dat\", "
                        "\"*.u8\"]`"}};
        for (const config::KeyDoc& key : detail::window_key_docs(detail::kBytes)) keys.push_back(key);
        return keys;
      }(),
      [](config::Section& r, DataSourceSpec& spec) {
        spec.files = r.require("files", " (an array of text file paths or glob patterns)").to_string_list();
        if (const auto v = r.find("exclude")) spec.exclude = v->to_string_list();
        detail::read_window_keys(r, spec);
      },
      detail::load_text, detail::probe_text, /*rescales=*/false};
  return format;
}

}  // namespace dtrain::data
