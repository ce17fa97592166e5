// DurableFile and friends: POSIX open/write/fsync, so a checkpoint's bytes are on
// disk before the rename that publishes them.
#include "checkpoint/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::checkpoint {
namespace {

std::string errno_text() { return std::strerror(errno); }

// The process-wide byte count and the armed write hook (set_write_hook).
std::atomic<uint64_t> g_total_bytes{0};
std::atomic<bool> g_hook_armed{false};
std::mutex g_hook_mutex;
uint64_t g_hook_at = 0;
WriteHook g_hook;

// Writes all of [p, p + size) to fd (retrying short writes and EINTR).
void write_all(int fd, const char* p, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(str("cannot write ", path, ": ", errno_text()));
    }
    p += n;
    size -= static_cast<size_t>(n);
    g_total_bytes.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  }
}

}  // namespace

void set_write_hook(uint64_t at_byte, WriteHook hook) {
  const std::lock_guard<std::mutex> lock(g_hook_mutex);
  g_hook_at = at_byte;
  g_hook = std::move(hook);
  g_hook_armed.store(static_cast<bool>(g_hook));
}

uint64_t total_bytes_written() { return g_total_bytes.load(); }

DurableFile::DurableFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw IoError(str("cannot create ", path_, ": ", errno_text()));
}

DurableFile::~DurableFile() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw IoError(str("write to closed file ", path_));
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  if (g_hook_armed.load()) {
    // Write up to exactly the hook's byte, run the hook, then (if it returns) the rest.
    WriteHook hook;
    uint64_t at = 0;
    {
      const std::lock_guard<std::mutex> lock(g_hook_mutex);
      const uint64_t before = g_total_bytes.load();
      if (g_hook && g_hook_at <= before + size) {
        at = std::max(g_hook_at, before);
        hook = std::move(g_hook);
        g_hook = nullptr;
        g_hook_armed.store(false);
        done = static_cast<size_t>(at - before);
      }
    }
    if (hook) {
      write_all(fd_, p, done, path_);
      hook(at);
    }
  }
  write_all(fd_, p + done, size - done, path_);
  sha_.update(data, size);
  bytes_ += size;
}

std::string DurableFile::close() {
  if (fd_ < 0) throw IoError(str("file closed twice: ", path_));
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw IoError(str("cannot fsync ", path_, ": ", why));
  }
  if (::close(fd) != 0) throw IoError(str("cannot close ", path_, ": ", errno_text()));
  return sha_.hex_digest();
}

std::string write_file_durably(const std::string& path, const std::string& text) {
  DurableFile file(path);
  file.write(text);
  return file.close();
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(str("cannot open directory ", dir, ": ", errno_text()));
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : "";
  ::close(fd);
  if (rc != 0) throw IoError(str("cannot fsync directory ", dir, ": ", why));
}

std::string sha256_file(const std::string& path, uint64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(str("cannot open ", path));
  Sha256 sha;
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    if (n > 0) {
      sha.update(buf.data(), static_cast<size_t>(n));
      total += static_cast<uint64_t>(n);
    }
  }
  if (in.bad()) throw IoError(str("cannot read ", path));
  if (bytes) *bytes = total;
  return sha.hex_digest();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(str("cannot open ", path));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw IoError(str("cannot read ", path));
  return text;
}

}  // namespace dtrain::checkpoint
