// Implementation of tfrecord.h: Boost.CRC for CRC-32C, ByteFile (zlib) to read,
// zlib's gzwrite (transparent mode "T" for plain files) to write.
#include "data/tfrecord.h"

#include <zlib.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/strings.h"
#include "data/byte_file.h"

namespace dtrain::data {
namespace {

using Crc32c = boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true>;

uint32_t load_u32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

uint64_t load_u64(const unsigned char* p) { return uint64_t{load_u32(p)} | uint64_t{load_u32(p + 4)} << 32; }

void store_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

void store_u64(unsigned char* p, uint64_t v) {
  store_u32(p, static_cast<uint32_t>(v));
  store_u32(p + 4, static_cast<uint32_t>(v >> 32));
}

// A record longer than this is taken as a corrupt length field (TensorFlow's
// records are protocol buffers, which stop at 2 GiB).
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 31;
// A record's data is read this much at a time, so that a length field that promises
// more than the file holds cannot make the reader allocate it all first.
constexpr size_t kReadChunk = size_t{1} << 20;

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  Crc32c crc;
  crc.process_bytes(data, n);
  return crc.checksum();
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TfRecordReader::TfRecordReader(std::string path, std::string json_path)
    : file_(std::make_unique<detail::ByteFile>(std::move(path), std::move(json_path),
                                               "fix the path or the glob pattern")) {}

TfRecordReader::~TfRecordReader() = default;

bool TfRecordReader::compressed() const { return file_->compressed(); }
const std::string& TfRecordReader::path() const { return file_->path(); }

std::string describe_record(int64_t index, uint64_t offset, bool compressed) {
  return str("record ", index, " (byte offset ", offset, compressed ? " of the uncompressed data)" : ")");
}

std::string TfRecordReader::where(int64_t index, uint64_t offset) const {
  return describe_record(index, offset, compressed());
}

bool TfRecordReader::next(std::string& out) {
  record_offset_ = offset_;
  ++index_;
  unsigned char header[12];
  const size_t got = file_->read(header, sizeof header);
  offset_ += got;
  if (got == 0) {
    --index_;
    return false;
  }
  const std::string hint = "; the file is truncated or not a TFRecord file: write or copy it again";
  if (got < sizeof header)
    file_->fail(str("ends inside the header of ", where(), ": ", got, " of 12 bytes", hint));
  if (masked_crc32c(header, 8) != load_u32(header + 8))
    file_->fail(str("has a bad length CRC at ", where(), hint));
  const uint64_t length = load_u64(header);
  if (length > kMaxRecordBytes)
    file_->fail(str("has an impossible length (", length, " bytes) at ", where(), hint));
  out.clear();
  size_t data_got = 0;
  while (data_got < length) {
    const size_t ask = static_cast<size_t>(std::min<uint64_t>(length - data_got, kReadChunk));
    out.resize(data_got + ask);
    const size_t got = file_->read(out.data() + data_got, ask);
    data_got += got;
    if (got < ask) break;
  }
  out.resize(data_got);
  unsigned char footer[4];
  const size_t footer_got = data_got == length ? file_->read(footer, sizeof footer) : 0;
  offset_ += data_got + footer_got;
  if (data_got < length || footer_got < sizeof footer)
    file_->fail(str("ends inside ", where(), ": it should hold ", length + 16, " bytes but has ",
                    12 + data_got + footer_got, hint));
  if (masked_crc32c(out.data(), out.size()) != load_u32(footer))
    file_->fail(str("has a bad data CRC at ", where(), ": the record's bytes are corrupt", hint));
  return true;
}

TfRecordWriter::TfRecordWriter(std::string path, std::string what, bool gzip)
    : path_(std::move(path)), what_(std::move(what)) {
  errno = 0;
  gzFile f = gzopen(path_.c_str(), gzip ? "wb6" : "wbT");
  if (!f)
    throw IoError(str(what_, ": cannot create '", path_, "': ", errno ? std::strerror(errno) : "out of memory"));
  file_ = f;
}

TfRecordWriter::~TfRecordWriter() {
  if (file_) gzclose_w(static_cast<gzFile>(file_));
}

void TfRecordWriter::put(const void* data, size_t n) {
  if (n == 0) return;
  if (gzwrite(static_cast<gzFile>(file_), data, static_cast<unsigned>(n)) != static_cast<int>(n)) {
    int errnum = Z_OK;
    const char* message = gzerror(static_cast<gzFile>(file_), &errnum);
    throw IoError(str(what_, ": cannot write '", path_, "': ",
                      errnum == Z_ERRNO ? std::strerror(errno) : message));
  }
}

void TfRecordWriter::write(const std::string& data) {
  unsigned char header[12];
  store_u64(header, data.size());
  store_u32(header + 8, masked_crc32c(header, 8));
  unsigned char footer[4];
  store_u32(footer, masked_crc32c(data.data(), data.size()));
  put(header, sizeof header);
  put(data.data(), data.size());
  put(footer, sizeof footer);
}

void TfRecordWriter::flush() {
  if (gzflush(static_cast<gzFile>(file_), Z_SYNC_FLUSH) != Z_OK)
    throw IoError(str(what_, ": cannot write '", path_, "': ", std::strerror(errno)));
}

void TfRecordWriter::close() {
  if (!file_) return;
  const int rc = gzclose_w(static_cast<gzFile>(file_));
  file_ = nullptr;
  if (rc != Z_OK) throw IoError(str(what_, ": cannot write '", path_, "' (closing it failed)"));
}

}  // namespace dtrain::data
