// TFRecord files, TensorFlow's record framing: read (plain or gzip) and written.
//
// Each record is
//   uint64  length            little-endian
//   uint32  masked CRC-32C of the 8 length bytes
//   bytes   data[length]
//   uint32  masked CRC-32C of the data
// where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (TensorFlow's
// crc32c::Mask). The reader checks both CRCs of every record; a bad CRC or a
// record cut short is an IoError naming the file and the record's byte offset.
// TensorBoard's event files use the same framing (trainer/reporting/tensorboard.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace dtrain::data {

// CRC-32C (Castagnoli) of n bytes (Boost.CRC).
uint32_t crc32c(const void* data, size_t n);
// TensorFlow's masked form of crc32c(data, n), as stored in TFRecord files.
uint32_t masked_crc32c(const void* data, size_t n);

// "record 12 (byte offset 9876)" or, for gzip files, "... of the uncompressed data)".
std::string describe_record(int64_t index, uint64_t offset, bool compressed);

namespace detail {
class ByteFile;
}

class TfRecordReader {
 public:
  // Opens `path`; zlib reads plain and gzip-compressed files alike. `json_path`
  // (e.g. "data.train.files[0]") prefixes every error.
  TfRecordReader(std::string path, std::string json_path);
  ~TfRecordReader();
  TfRecordReader(const TfRecordReader&) = delete;
  TfRecordReader& operator=(const TfRecordReader&) = delete;

  // Reads the next record's data into `out`; false at the end of the file.
  bool next(std::string& out);

  bool compressed() const;
  // The record last returned: its 0-based number and byte offset in the
  // (uncompressed) file.
  int64_t record_index() const { return index_ - 1; }
  uint64_t record_offset() const { return record_offset_; }
  // describe_record() of the record last returned, or of any record by its number
  // and offset.
  std::string where() const { return where(record_index(), record_offset_); }
  std::string where(int64_t index, uint64_t offset) const;
  const std::string& path() const;

 private:
  std::unique_ptr<detail::ByteFile> file_;
  int64_t index_ = 0;
  uint64_t offset_ = 0;         // bytes consumed so far
  uint64_t record_offset_ = 0;  // where the current record began
};

class TfRecordWriter {
 public:
  // Creates (or truncates) `path`; gzip-compresses when `gzip`. `what` names the
  // file's role in errors ("output.dir").
  TfRecordWriter(std::string path, std::string what, bool gzip = false);
  ~TfRecordWriter();  // closes (errors at close are reported by close(), not here)
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  void write(const std::string& data);  // appends one record
  void flush();                         // to the operating system
  void close();                         // flushes and closes; IoError if that fails

  const std::string& path() const { return path_; }

 private:
  void put(const void* data, size_t n);
  std::string path_, what_;
  void* file_ = nullptr;  // gzFile (plain files too: mode "wbT")
};

}  // namespace dtrain::data
