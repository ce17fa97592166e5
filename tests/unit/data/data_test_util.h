// Helpers for the data tests: writers for small IDX (plain or gzip) and CIFAR-10
// binary files, into a test's TempDir (support/temp_dir.h), and tf.train.Example
// records encoded by hand (the tests do not link the generated protobuf code);
// the TFRecord fixtures TensorFlow wrote, and a load's error message.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
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

// tests/fixtures/tfrecord/: files TensorFlow wrote (tests/fixtures/make_tf_fixtures.py).
inline const std::string kTfFixtures = std::string(DTRAIN_SOURCE_DIR) + "/tests/fixtures/tfrecord/";

// What kTfFixtures' fixtures.json says of `file`.
inline nlohmann::json tf_fixture_facts(const std::string& file) {
  std::ifstream in(kTfFixtures + "fixtures.json");
  return nlohmann::json::parse(in).at("files").at(file);
}

// A data.train source of `format` (text, or tfrecord's token ids) in windows of
// sequence_length tokens every `stride` (0: sequence_length).
inline data::DataSourceSpec windows_spec(const std::string& format, std::vector<std::string> files,
                                         int64_t sequence_length, int64_t stride) {
  data::DataSourceSpec spec;
  spec.path = "data.train";
  spec.format = &data::data_format(format);
  spec.files = std::move(files);
  spec.sequence_length = sequence_length;
  spec.stride = stride;
  return spec;
}

// The message of the error that loading `spec` throws, or "no error".
inline std::string load_error(const data::DataSourceSpec& spec) {
  try {
    data::load_dataset(spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A protocol buffer varint (negative int64s as their ten-byte two's complement).
inline std::string pb_varint(uint64_t n) {
  std::string out;
  for (;; n >>= 7) {
    out.push_back(static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0)));
    if (n < 0x80) return out;
  }
}

// A length-delimited protocol buffer field.
inline std::string pb_field(int number, const std::string& payload) {
  return std::string(1, static_cast<char>(number << 3 | 2)) + pb_varint(payload.size()) + payload;
}

// One entry of a tf.train.Example's feature map: `name` -> a Feature whose list
// (1 bytes_list, 2 float_list, 3 int64_list) holds `list` (the encoded list message).
inline std::string example_feature(const std::string& name, int kind, const std::string& list) {
  return pb_field(1, pb_field(1, name) + pb_field(2, pb_field(kind, list)));
}

// An Int64List message (packed values).
inline std::string int64_list(const std::vector<int64_t>& values) {
  std::string packed;
  for (const int64_t v : values) packed += pb_varint(static_cast<uint64_t>(v));
  return pb_field(1, packed);
}

// A tf.train.Example of the given feature map entries (example_feature()).
inline std::string example_of(const std::vector<std::string>& features) {
  std::string all;
  for (const std::string& f : features) all += f;
  return pb_field(1, all);
}

}  // namespace dtrain::data::testing
