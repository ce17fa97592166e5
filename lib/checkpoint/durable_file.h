// Durable file writing for checkpoints: a writer that hashes what it writes and
// fsyncs on close, directory fsync, and streaming SHA-256 of a file on disk.
//
// "Durable" means: once close() / fsync_dir() return, the bytes and the directory
// entry survive a crash of the process or the machine (POSIX fsync semantics).
#pragma once

#include <cstdint>
#include <string>

#include "core/sha256.h"

namespace dtrain::checkpoint {

// Creates (truncates) `path` and writes to it. close() flushes and fsyncs; the
// destructor closes without fsync if close() was not called (an abandoned write).
// Errors are IoError naming the file.
class DurableFile {
 public:
  explicit DurableFile(std::string path);
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  void write(const void* data, size_t size);
  void write(const std::string& text) { write(text.data(), text.size()); }
  // fsyncs and closes. Returns the SHA-256 (hex) of everything written.
  std::string close();
  uint64_t bytes_written() const { return bytes_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t bytes_ = 0;
  Sha256 sha_;
};

// Writes `text` to `path` durably; returns its SHA-256.
std::string write_file_durably(const std::string& path, const std::string& text);

// fsyncs a directory so that entries created, renamed or removed in it are durable.
void fsync_dir(const std::string& dir);

// SHA-256 (hex) of a file's contents, read in chunks; `bytes` gets its size.
std::string sha256_file(const std::string& path, uint64_t* bytes = nullptr);

// The whole file as a string (IoError naming the file if it cannot be read).
std::string read_file(const std::string& path);

}  // namespace dtrain::checkpoint
