// The text reader: UTF-8 files as one byte-level token corpus, cut into windows
// for a language model (`format: text`).
//
// The files (globs expanded, then those named by `exclude` left out) are read as
// bytes, concatenated in order; each byte is a token (vocabulary 256). With
// `validation_split` the corpus is cut once: the training subset is the first
// part, the validation subset the last `validation_split` of the bytes, and no
// window crosses the cut. Sample i of a subset is the window of sequence_length + 1
// bytes at i * stride: its first sequence_length bytes as float token ids, its
// labels the last sequence_length bytes (each position's next token). The bytes
// are held once (Dataset::corpus); samples and labels are read from the window
// when asked for, so a stride of 1 costs no more memory than the text.
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

namespace dtrain::data::detail {
namespace {

constexpr const char* kMissingHint = "fix the path, or the pattern in files";
constexpr int64_t kMaxLength = int64_t{1} << 30;  // sequence_length and stride: no overflow in window arithmetic

void check_fields(const DataSourceSpec& spec) {
  if (spec.files.empty())
    throw ConfigError(str(spec.path, ".files: missing or empty: a text source needs its files, e.g. "
                                     "[\"/usr/share/games/fortunes/*\"]"));
  if (spec.sequence_length < 1)
    throw ConfigError(str(spec.path, ".sequence_length: must be >= 1, got ", spec.sequence_length,
                          " (the tokens of one sample; its labels are the next token at each position)"));
  if (spec.sequence_length > kMaxLength)
    throw ConfigError(str(spec.path, ".sequence_length: ", spec.sequence_length, " is too large (at most ", kMaxLength,
                          ")"));
  if (spec.stride < 0 || spec.stride > kMaxLength)
    throw ConfigError(str(spec.path, ".stride: must be in [1, ", kMaxLength, "], got ", spec.stride));
  if (!(spec.validation_split >= 0.0 && spec.validation_split < 1.0))
    throw ConfigError(str(spec.path, ".validation_split: must be in [0, 1), got ", spec.validation_split));
  if (spec.validation_split > 0.0 && spec.subset.empty())
    throw ConfigError(str(spec.path, ".subset: missing: with validation_split ", spec.validation_split,
                          " say which part of the corpus this source is, \"training\" or \"validation\""));
  if (spec.validation_split == 0.0 && !spec.subset.empty())
    throw ConfigError(str(spec.path, ".subset: \"", spec.subset, "\" needs validation_split > 0 (the fraction of "
                          "the corpus held out for validation); set it, or drop subset"));
  if (!spec.subset.empty() && spec.subset != "training" && spec.subset != "validation")
    throw ConfigError(str(spec.path, ".subset: must be \"training\" or \"validation\", got \"", spec.subset, "\""));
}

int64_t stride_of(const DataSourceSpec& spec) { return spec.stride > 0 ? spec.stride : spec.sequence_length; }

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

// The subset's byte range [begin, end) of a corpus of `total` bytes, and its windows.
struct Part {
  int64_t begin = 0, end = 0, count = 0;
};

Part part_of(const DataSourceSpec& spec, int64_t total) {
  if (total == 0)
    throw IoError(str(spec.path, ".files: the corpus is empty (every file matched has 0 bytes); give files "
                                 "that hold text"));
  const auto held_out = static_cast<int64_t>(spec.validation_split * static_cast<double>(total));
  const bool validation = spec.subset == "validation";
  Part p;
  p.begin = validation ? total - held_out : 0;
  p.end = validation ? total : total - held_out;
  const int64_t window = spec.sequence_length + 1;
  const int64_t length = p.end - p.begin;
  if (length < window)
    throw ConfigError(str(spec.path, ".sequence_length: ", spec.sequence_length, " needs windows of ", window,
                          " bytes (the tokens and the next one), but ",
                          spec.subset.empty() ? std::string("the corpus") : str("the ", spec.subset, " subset"),
                          " has ", length, " bytes", spec.subset.empty() ? "" : str(" (of ", total, ")"),
                          "; use a shorter sequence_length",
                          spec.validation_split > 0 ? ", another validation_split" : "", " or more text"));
  p.count = (length - window) / stride_of(spec) + 1;
  return p;
}

}  // namespace

Dataset load_text(const DataSourceSpec& spec) {
  check_fields(spec);
  std::vector<uint8_t> bytes = read_corpus(spec);
  const Part p = part_of(spec, static_cast<int64_t>(bytes.size()));
  Dataset ds;
  ds.name = spec.path;
  ds.sample_shape = {spec.sequence_length};
  ds.count = p.count;
  ds.rescale = 1.0f;
  ds.label_width = spec.sequence_length;
  ds.window_stride = stride_of(spec);
  // Only the bytes this subset's windows cover.
  const int64_t used = (p.count - 1) * ds.window_stride + spec.sequence_length + 1;
  if (p.begin == 0 && used == static_cast<int64_t>(bytes.size())) {
    ds.corpus = std::move(bytes);
  } else {
    ds.corpus.assign(bytes.begin() + p.begin, bytes.begin() + p.begin + used);
  }
  return ds;
}

DatasetInfo probe_text(const DataSourceSpec& spec) {
  check_fields(spec);
  int64_t total = 0;
  for (const std::string& file : text_files(spec)) {
    ByteFile in(file, str(spec.path, ".files"), kMissingHint);
    total += static_cast<int64_t>(in.read_payload(ByteFile::kToEnd, nullptr).got);
  }
  DatasetInfo info;
  info.sample_shape = {spec.sequence_length};
  info.count = part_of(spec, total).count;
  info.label_width = spec.sequence_length;
  return info;
}

}  // namespace dtrain::data::detail

namespace dtrain::data {

// The registry entry (dataset.h): keys, reader, loaders.
const DataFormat& text_format() {
  static const DataFormat format{
      "text",
      "UTF-8 text files as byte tokens (vocabulary 256), concatenated in order, cut into windows for a language "
      "model: a sample is `sequence_length` tokens (as floats), its labels the next token at each position",
      {{"files", "paths or glob patterns, in order (required, e.g. `/usr/share/games/fortunes/*`)"},
       {"exclude", "`[]`: glob patterns of file names (without the directory) to leave out, e.g. `[\"*.dat\", "
                   "\"*.u8\"]`"},
       {"sequence_length", "tokens per sample (required, >= 1); a sample's window is one byte longer"},
       {"stride", "sequence_length: bytes between the starts of two windows (>= 1)"},
       {"validation_split", "0: the fraction of the corpus, at its end, held out for validation, in [0, 1)"},
       {"subset", "`training` (the first part) or `validation` (the held-out end); required when "
                  "validation_split > 0"}},
      [](config::Section& r, DataSourceSpec& spec) {
        spec.files = r.require("files", " (an array of text file paths or glob patterns)").to_string_list();
        if (const auto v = r.find("exclude")) spec.exclude = v->to_string_list();
        spec.sequence_length = r.require_int("sequence_length", 1);
        spec.stride = r.get_int("stride", 0, 1);
        spec.validation_split = r.get_double("validation_split", 0.0, config::kFraction);
        spec.subset = r.get_choice("subset", "", {"training", "validation"}, "subset");
      },
      detail::load_text, detail::probe_text, /*rescales=*/false};
  return format;
}

}  // namespace dtrain::data
