// Tests of the CIFAR-10 binary reader (generated files: the plane-to-HWC transpose,
// concatenation, bad sizes and labels) and of the synthetic source (determinism,
// label range, seeds, and that a simple classifier can learn it).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "data/dataset.h"
#include "data_test_util.h"

using namespace dtrain;
using namespace dtrain::data;
using namespace dtrain::data::testing;
using Catch::Matchers::Contains;

namespace {

// Record r of a test file: label r % 10, channel c of pixel p = (r + 3c + 5p) % 256.
uint8_t cifar_value(int r, int c, int p) { return static_cast<uint8_t>((r + 3 * c + 5 * p) % 256); }

Bytes cifar_records(int first, int count) {
  Bytes out;
  for (int r = first; r < first + count; ++r) {
    out.push_back(static_cast<uint8_t>(r % 10));
    for (int c = 0; c < 3; ++c)
      for (int p = 0; p < 1024; ++p) out.push_back(cifar_value(r, c, p));
  }
  return out;
}

data::DataSourceSpec synthetic_spec(uint64_t seed, int64_t count = 200) {
  data::DataSourceSpec spec;
  spec.path = "data.train";
  spec.format = &data::data_format("synthetic");
  spec.shape = {4, 4, 2};
  spec.classes = 5;
  spec.count = count;
  spec.seed = seed;
  return spec;
}

}  // namespace

TEST_CASE("cifar10: records become HWC bytes and files are concatenated in order") {
  TempDir dir;
  data::DataSourceSpec spec;
  spec.path = "data.train";
  spec.format = &data::data_format("cifar10");
  spec.files = {write_plain(dir.file("data_batch_1.bin"), cifar_records(0, 3)),
                write_plain(dir.file("data_batch_2.bin"), cifar_records(3, 2))};
  const Dataset ds = load_dataset(spec);
  CHECK(ds.count == 5);
  CHECK(ds.sample_shape == Shape{32, 32, 3});
  CHECK(ds.labels == std::vector<int32_t>{0, 1, 2, 3, 4});
  CHECK(ds.max_label == 4);
  CHECK(ds.max_label_index == 4);
  REQUIRE(ds.pixels.size() == 5u * 3072u);
  int mismatches = 0;
  for (int r = 0; r < 5; ++r)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c)
          mismatches += ds.pixels[r * 3072 + (y * 32 + x) * 3 + c] != cifar_value(r, c, y * 32 + x);
  CHECK(mismatches == 0);
  std::vector<float> sample(3072);
  ds.copy_sample(1, sample.data());
  CHECK(sample[3 * 10 + 2] == static_cast<float>(cifar_value(1, 2, 10)) * (1.0f / 255.0f));

  const DatasetInfo info = probe_dataset(spec);
  CHECK(info.count == 5);
  CHECK(info.sample_shape == Shape{32, 32, 3});
}

TEST_CASE("cifar10: a gzip file reads like the plain one") {
  TempDir dir;
  data::DataSourceSpec spec;
  spec.path = "data.train";
  spec.format = &data::data_format("cifar10");
  spec.files = {write_plain(dir.file("a.bin"), cifar_records(0, 4))};
  const Dataset plain = load_dataset(spec);
  spec.files = {write_gz(dir.file("a.bin.gz"), cifar_records(0, 4))};
  const Dataset gz = load_dataset(spec);
  CHECK(gz.pixels == plain.pixels);
  CHECK(gz.labels == plain.labels);
  CHECK(probe_dataset(spec).count == 4);
}

TEST_CASE("cifar10: a size that is not a multiple of 3073 bytes is an IoError") {
  TempDir dir;
  data::DataSourceSpec spec;
  spec.path = "data.train";
  spec.format = &data::data_format("cifar10");
  Bytes bytes = cifar_records(0, 2);
  bytes.pop_back();
  spec.files = {write_plain(dir.file("ok.bin"), cifar_records(0, 1)),
                write_plain(dir.file("short.bin"), bytes)};
  std::string what;
  try {
    load_dataset(spec);
  } catch (const IoError& e) {
    what = e.what();
  }
  CHECK_THAT(what, Contains("data.train.files[1]: '" + spec.files[1] + "' has 6145 bytes"));
  CHECK_THAT(what, Contains("3073"));
  CHECK_THROWS_AS(probe_dataset(spec), IoError);
}

TEST_CASE("cifar10: a label above 9 or a missing file is an IoError") {
  TempDir dir;
  data::DataSourceSpec spec;
  spec.path = "data.test";
  spec.format = &data::data_format("cifar10");
  Bytes bytes = cifar_records(0, 2);
  bytes[3073] = 42;
  spec.files = {write_plain(dir.file("bad.bin"), bytes)};
  CHECK_THROWS_WITH(load_dataset(spec), Contains("record 1 has the label 42"));
  spec.files = {dir.file("missing.bin")};
  CHECK_THROWS_WITH(load_dataset(spec),
                    Contains("data.test.files[0]: cannot open '" + spec.files[0] + "'"));
  CHECK_THROWS_AS(probe_dataset(spec), IoError);
  spec.files.clear();
  CHECK_THROWS_AS(load_dataset(spec), ConfigError);
}

TEST_CASE("synthetic: the same spec gives the same bits, pinned across platforms") {
  const Dataset a = load_dataset(synthetic_spec(7));
  const Dataset b = load_dataset(synthetic_spec(7));
  CHECK(a.count == 200);
  CHECK(a.sample_shape == Shape{4, 4, 2});
  CHECK(a.pixels.empty());
  REQUIRE(a.values.size() == 200u * 32u);
  CHECK(std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(float)) == 0);
  CHECK(a.labels == b.labels);
  // A checksum of the bits: the generator uses only integer and single float ops,
  // so this value must be the same on every platform and compiler.
  uint64_t h = 1469598103934665603ull;
  for (float v : a.values) {
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    h = (h ^ bits) * 1099511628211ull;
  }
  for (int32_t l : a.labels) h = (h ^ static_cast<uint32_t>(l)) * 1099511628211ull;
  CHECK(h == 0x35caa333174c5127ull);
}

TEST_CASE("synthetic: labels are in range, every class occurs, and seeds differ") {
  const Dataset a = load_dataset(synthetic_spec(1));
  const Dataset b = load_dataset(synthetic_spec(2));
  std::set<int32_t> classes(a.labels.begin(), a.labels.end());
  CHECK(classes == std::set<int32_t>{0, 1, 2, 3, 4});
  CHECK(a.max_label == 4);
  CHECK(a.labels[a.max_label_index] == 4);
  CHECK(a.labels != b.labels);
  CHECK(a.values != b.values);
  // take keeps a prefix of the same stream.
  data::DataSourceSpec spec = synthetic_spec(1);
  spec.take = 10;
  const Dataset c = load_dataset(spec);
  CHECK(c.count == 10);
  CHECK(std::vector<float>(a.values.begin(), a.values.begin() + 320) == c.values);
  CHECK(probe_dataset(spec).count == 10);
  CHECK(probe_dataset(synthetic_spec(1)).sample_shape == Shape{4, 4, 2});
}

TEST_CASE("synthetic: a nearest-class-mean classifier learns it") {
  const Dataset ds = load_dataset(synthetic_spec(3, 1000));
  const int64_t numel = ds.sample_numel();
  std::vector<double> means(5 * numel, 0.0);
  std::vector<int> counts(5, 0);
  for (int64_t i = 0; i < 500; ++i) {
    ++counts[ds.labels[i]];
    for (int64_t j = 0; j < numel; ++j) means[ds.labels[i] * numel + j] += ds.values[i * numel + j];
  }
  for (int c = 0; c < 5; ++c)
    for (int64_t j = 0; j < numel; ++j) means[c * numel + j] /= std::max(counts[c], 1);
  int correct = 0;
  for (int64_t i = 500; i < 1000; ++i) {
    int best = -1;
    double best_d = 1e300;
    for (int c = 0; c < 5; ++c) {
      double d = 0;
      for (int64_t j = 0; j < numel; ++j) {
        const double e = ds.values[i * numel + j] - means[c * numel + j];
        d += e * e;
      }
      if (d < best_d) best_d = d, best = c;
    }
    correct += best == ds.labels[i];
  }
  CHECK(correct >= 475);  // 95 %
}

TEST_CASE("synthetic: a spec without shape or count is a ConfigError naming the field") {
  data::DataSourceSpec spec = synthetic_spec(1);
  spec.shape.clear();
  CHECK_THROWS_WITH(load_dataset(spec), Contains("data.train.shape"));
  spec = synthetic_spec(1);
  spec.count = 0;
  CHECK_THROWS_AS(probe_dataset(spec), ConfigError);
  spec = synthetic_spec(1);
  spec.shape = {4, 0};
  CHECK_THROWS_WITH(load_dataset(spec), Contains("data.train.shape[1]"));
}
