// DurableFile and friends: POSIX open/write/fsync, so a checkpoint's bytes are on
// disk before the rename that publishes them.
#include "checkpoint/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::checkpoint {
namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

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
  size_t left = size;
  while (left > 0) {
    const ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(str("cannot write ", path_, ": ", errno_text()));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
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
