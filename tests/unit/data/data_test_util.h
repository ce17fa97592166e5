// Helpers for the data tests: writers for small IDX (plain or gzip) and CIFAR-10
// binary files, into a test's TempDir (support/temp_dir.h).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "support/temp_dir.h"

namespace dtrain::data::testing {

using Bytes = std::vector<uint8_t>;

// The temporary folder of each test (support/temp_dir.h).
using test::TempDir;

inline void put_be32(Bytes& out, uint32_t v) {
  out.push_back(static_cast<uint8_t>(v >> 24));
  out.push_back(static_cast<uint8_t>(v >> 16));
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

// The bytes of an IDX images file: magic 0x803, (n, h, w), then `pixels`.
inline Bytes idx_images(uint32_t n, uint32_t h, uint32_t w, const Bytes& pixels) {
  Bytes out;
  put_be32(out, 0x00000803);
  put_be32(out, n);
  put_be32(out, h);
  put_be32(out, w);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

// The bytes of an IDX labels file: magic 0x801, (n), then `labels`.
inline Bytes idx_labels(uint32_t n, const Bytes& labels) {
  Bytes out;
  put_be32(out, 0x00000801);
  put_be32(out, n);
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

inline std::string write_plain(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
  return path;
}

inline std::string write_gz(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("gzopen failed for " + path);
  const int written = bytes.empty() ? 0 : gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  if (gzclose(f) != Z_OK || written != static_cast<int>(bytes.size()))
    throw std::runtime_error("gzwrite failed for " + path);
  return path;
}

inline Bytes read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A deterministic pixel pattern: image i, pixel j.
inline uint8_t pattern(uint32_t i, uint32_t j) { return static_cast<uint8_t>((i * 31 + j * 7 + 3) % 256); }

// A small IDX set (n images of h x w, label i % 10) written plain or gzipped.
struct SmallIdx {
  uint32_t n = 0, h = 0, w = 0;
  Bytes pixels, labels;
  data::DataSourceSpec spec;
};

inline SmallIdx write_small_idx(const TempDir& dir, uint32_t n, uint32_t h, uint32_t w, bool gz,
                                const std::string& stem = "set") {
  SmallIdx s;
  s.n = n;
  s.h = h;
  s.w = w;
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t j = 0; j < h * w; ++j) s.pixels.push_back(pattern(i, j));
    s.labels.push_back(static_cast<uint8_t>((i * 3) % 10));
  }
  auto write = gz ? write_gz : write_plain;
  const std::string ext = gz ? ".gz" : "";
  s.spec.path = "data.train";
  s.spec.format = &data::data_format("idx");
  s.spec.images = write(dir.file(stem + "-images-idx3-ubyte" + ext), idx_images(n, h, w, s.pixels));
  s.spec.labels = write(dir.file(stem + "-labels-idx1-ubyte" + ext), idx_labels(n, s.labels));
  return s;
}

}  // namespace dtrain::data::testing
