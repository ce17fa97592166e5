// ByteFile: a read-only byte stream over a plain or gzip-compressed file (internal
// to lib/data).
//
// zlib's gz* functions read both kinds transparently, so the readers never ask
// which one they got. ByteFile turns every failure into an IoError that names the
// JSON path the file came from, the file, what went wrong and how to fix it. For
// plain files it also knows the size from stat(), so probing and truncation checks
// need not read the data; for compressed files they stream through it instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::data::detail {

class ByteFile {
 public:
  // Opens `path` for reading. `json_path` (e.g. "data.train.images") prefixes every
  // error; `missing_hint` is appended when the file does not exist.
  ByteFile(std::string path, std::string json_path, std::string missing_hint);
  ~ByteFile();
  ByteFile(const ByteFile&) = delete;
  ByteFile& operator=(const ByteFile&) = delete;

  // Reads up to n bytes into dst; fewer only at the end of the data.
  size_t read(void* dst, size_t n);

  // Payload bytes wanted after the header, and what the file actually had.
  struct Payload {
    uint64_t got = 0;       // bytes of the wanted payload present (<= want)
    uint64_t trailing = 0;  // bytes after the wanted payload
  };
  static constexpr uint64_t kToEnd = UINT64_MAX;  // want: everything that is left
  // Reads `want` more bytes (or all of them for kToEnd), appending them to *out (or
  // discarding them when out is null), then counts the bytes after them without
  // keeping them. A plain file that is too short is not read at all: the sizes come
  // from stat().
  Payload read_payload(uint64_t want, std::vector<uint8_t>* out);

  bool compressed() const { return !direct_; }
  const std::string& path() const { return path_; }
  const std::string& json_path() const { return json_path_; }

  // Throws IoError "<json_path>: '<path>' <what>".
  [[noreturn]] void fail(const std::string& what) const;

 private:
  [[noreturn]] void fail_zlib() const;

  std::string path_;
  std::string json_path_;
  void* file_ = nullptr;      // gzFile (kept out of the header: zlib.h is not needed here)
  uint64_t file_size_ = 0;    // on-disk size
  uint64_t consumed_ = 0;     // uncompressed bytes read so far
  bool direct_ = false;       // true once zlib says the file is not compressed
};

}  // namespace dtrain::data::detail
