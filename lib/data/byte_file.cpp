// Implementation of ByteFile (byte_file.h): zlib's gzopen/gzread over plain and
// gzip files, stat() for plain-file sizes, and IoErrors that say what to do.
#include "data/byte_file.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::data::detail {
namespace {

constexpr size_t kChunk = size_t{4} << 20;  // streaming read size for compressed files

gzFile as_gz(void* p) { return static_cast<gzFile>(p); }

}  // namespace

ByteFile::ByteFile(std::string path, std::string json_path, std::string missing_hint)
    : path_(std::move(path)), json_path_(std::move(json_path)) {
  if (path_.empty())
    throw ConfigError(str(json_path_, ": no file name given (set it in the job config)"));
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    const int err = errno;
    std::string hint;
    if (err == ENOENT || err == ENOTDIR)
      hint = missing_hint.empty() ? "fix the path" : missing_hint;
    else if (err == EACCES)
      hint = "check the permissions of the file and its folders";
    throw IoError(str(json_path_, ": cannot open '", path_, "': ", std::strerror(err),
                      hint.empty() ? "" : str(" (", hint, ")")));
  }
  if (S_ISDIR(st.st_mode))
    throw IoError(str(json_path_, ": cannot open '", path_,
                      "': it is a directory (name the data file inside it)"));
  // (a FIFO would block the open until a writer came, and a device or pipe has
  // no size to check the file's header against)
  if (!S_ISREG(st.st_mode))
    throw IoError(str(json_path_, ": cannot read '", path_, "': it is ",
                      S_ISFIFO(st.st_mode)  ? "a named pipe (FIFO)"
                      : S_ISSOCK(st.st_mode) ? "a socket"
                                             : "a device",
                      ", not a regular file (write the data to a file and name that)"));
  file_size_ = static_cast<uint64_t>(st.st_size);
  errno = 0;
  gzFile f = gzopen(path_.c_str(), "rb");
  if (!f) {
    const int err = errno;
    throw IoError(str(json_path_, ": cannot open '", path_, "': ",
                      err ? std::strerror(err) : "out of memory",
                      err == EACCES ? " (check the permissions of the file)" : ""));
  }
  file_ = f;
  gzbuffer(f, 256 * 1024);
  // gzdirect() right after gzopen() looks at the first bytes to tell plain from gzip.
  direct_ = gzdirect(f) != 0;
}

ByteFile::~ByteFile() {
  if (file_) gzclose_r(as_gz(file_));
}

void ByteFile::fail(const std::string& what) const {
  throw IoError(str(json_path_, ": '", path_, "' ", what));
}

void ByteFile::fail_zlib() const {
  int errnum = Z_OK;
  std::string message = gzerror(as_gz(file_), &errnum);
  // zlib puts the file name in front; the message names it already.
  if (message.rfind(path_ + ": ", 0) == 0) message.erase(0, path_.size() + 2);
  if (errnum == Z_ERRNO)
    fail(str("could not be read: ", std::strerror(errno)));
  if (errnum == Z_BUF_ERROR)
    fail(str("is truncated: the compressed data ends early (zlib: ", message,
             "); download or copy the file again"));
  fail(str("is corrupt: zlib cannot decompress it (", message,
           "); download or copy the file again"));
}

size_t ByteFile::read(void* dst, size_t n) {
  size_t total = 0;
  auto* p = static_cast<unsigned char*>(dst);
  while (total < n) {
    const unsigned ask = static_cast<unsigned>(std::min<size_t>(n - total, INT_MAX / 2));
    const int got = gzread(as_gz(file_), p + total, ask);
    if (got < 0) fail_zlib();
    if (got == 0) {
      // gzread returns 0 at the end of the data, and also when an error is pending.
      int errnum = Z_OK;
      gzerror(as_gz(file_), &errnum);
      if (errnum != Z_OK) fail_zlib();
      break;
    }
    total += static_cast<size_t>(got);
  }
  consumed_ += total;
  return total;
}

ByteFile::Payload ByteFile::read_payload(uint64_t want, std::vector<uint8_t>* out) {
  Payload payload;
  if (direct_) {
    // Plain file: the sizes are known without reading anything.
    const uint64_t remaining = file_size_ > consumed_ ? file_size_ - consumed_ : 0;
    payload.got = std::min(want, remaining);
    payload.trailing = remaining - payload.got;
    if (out && payload.got > 0 && (payload.got == want || want == kToEnd)) {
      const size_t start = out->size();
      out->resize(start + payload.got);
      const size_t got = read(out->data() + start, payload.got);
      if (got != payload.got) {
        out->resize(start + got);
        fail(str("became shorter while it was being read (expected ", payload.got,
                 " more bytes, got ", got, ")"));
      }
    }
    return payload;
  }
  // Compressed: stream through it. `out` grows only as data arrives, so a header that
  // announces an absurd size cannot make us allocate it.
  std::vector<uint8_t> scratch;
  while (payload.got < want) {
    const size_t ask = static_cast<size_t>(std::min<uint64_t>(kChunk, want - payload.got));
    size_t got = 0;
    if (out) {
      const size_t start = out->size();
      out->resize(start + ask);
      got = read(out->data() + start, ask);
      out->resize(start + got);
    } else {
      scratch.resize(kChunk);
      got = read(scratch.data(), ask);
    }
    payload.got += got;
    if (got < ask) return payload;  // the data ended before `want`
  }
  scratch.resize(kChunk);
  for (;;) {
    const size_t got = read(scratch.data(), scratch.size());
    payload.trailing += got;
    if (got < scratch.size()) break;
  }
  return payload;
}

}  // namespace dtrain::data::detail
