// Durable file writing for checkpoints: a writer that hashes what it writes and
// fsyncs on close, directory fsync, and streaming SHA-256 of a file on disk.
//
// "Durable" means: once close() / fsync_dir() return, the bytes and the directory
// entry survive a crash of the process or the machine (POSIX fsync semantics).
#pragma once

#include <cstdint>
#include <functional>
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

// A test hook for crash-during-save tests: once DurableFile writes (every file, every
// save, counted process-wide) reach `at_byte` bytes in total, the write stops at
// exactly that byte and `hook(at_byte)` runs; it fires once and is then removed.
// lib/ only calls the hook: what it does (the dtrain app's DTRAIN_INJECT=
// kill@ckpt_byte=N raises SIGKILL) is the caller's business. If the hook returns,
// the write carries on. An empty hook removes the one installed. Not for
// production use: it adds a branch to every write, nothing else.
using WriteHook = std::function<void(uint64_t bytes_written_so_far)>;
void set_write_hook(uint64_t at_byte, WriteHook hook);

// Bytes DurableFile has written in this process so far (all files).
uint64_t total_bytes_written();

// Writes `text` to `path` durably; returns its SHA-256.
std::string write_file_durably(const std::string& path, const std::string& text);

// fsyncs a directory so that entries created, renamed or removed in it are durable.
void fsync_dir(const std::string& dir);

// SHA-256 (hex) of a file's contents, read in chunks; `bytes` gets its size.
std::string sha256_file(const std::string& path, uint64_t* bytes = nullptr);

// The whole file as a string (IoError naming the file if it cannot be read).
std::string read_file(const std::string& path);

}  // namespace dtrain::checkpoint
