// Tests of the IDX reader: small generated files (plain and gzip) for values,
// rescale, labels, take and every kind of broken file; the real Fashion-MNIST for
// sizes and classes; probe_dataset() against load_dataset().
#include <catch2/catch.hpp>

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

// Runs fn, requires it to throw E, returns what().
template <class E, class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("expected an exception that was not thrown");
  return {};
}

}  // namespace

TEST_CASE("idx: a plain file loads with its shape, labels and rescaled values") {
  TempDir dir;
  const SmallIdx s = write_small_idx(dir, 5, 3, 4, /*gz=*/false);
  const Dataset ds = load_dataset(s.spec);
  CHECK(ds.name == "data.train");
  CHECK(ds.count == 5);
  CHECK(ds.sample_shape == Shape{3, 4, 1});
  CHECK(ds.sample_numel() == 12);
  CHECK(ds.pixels == s.pixels);
  CHECK(ds.values.empty());
  REQUIRE(ds.labels.size() == 5);
  for (int i = 0; i < 5; ++i) CHECK(ds.labels[i] == s.labels[i]);
  // Labels 0, 3, 6, 9, 2: the largest is 9, at sample 3.
  CHECK(ds.max_label == 9);
  CHECK(ds.max_label_index == 3);
  std::vector<float> sample(12);
  ds.copy_sample(4, sample.data());
  for (uint32_t j = 0; j < 12; ++j) CHECK(sample[j] == static_cast<float>(pattern(4, j)) * (1.0f / 255.0f));
}

TEST_CASE("idx: a gzip file loads exactly like the plain one") {
  TempDir dir;
  const Dataset plain = load_dataset(write_small_idx(dir, 7, 2, 5, false, "plain").spec);
  const Dataset gz = load_dataset(write_small_idx(dir, 7, 2, 5, true, "gz").spec);
  CHECK(gz.count == plain.count);
  CHECK(gz.sample_shape == plain.sample_shape);
  CHECK(gz.pixels == plain.pixels);
  CHECK(gz.labels == plain.labels);
}

TEST_CASE("idx: rescale comes from the spec, and decode_all matches copy_sample") {
  TempDir dir;
  SmallIdx s = write_small_idx(dir, 4, 2, 2, false);
  s.spec.rescale = 0.5;
  Dataset ds = load_dataset(s.spec);
  CHECK(ds.rescale == 0.5f);
  std::vector<float> before(4 * 4);
  for (int i = 0; i < 4; ++i) ds.copy_sample(i, before.data() + 4 * i);
  CHECK(before[1] == static_cast<float>(pattern(0, 1)) * 0.5f);
  ds.decode_all();
  CHECK(ds.pixels.empty());
  REQUIRE(ds.values.size() == 16);
  CHECK(std::memcmp(ds.values.data(), before.data(), 16 * sizeof(float)) == 0);
  std::vector<float> after(4);
  ds.copy_sample(2, after.data());
  CHECK(std::memcmp(after.data(), before.data() + 8, 4 * sizeof(float)) == 0);
  ds.decode_all();  // a second call changes nothing
  CHECK(ds.values.size() == 16);
}

TEST_CASE("idx: take keeps the first samples and recomputes the largest label") {
  TempDir dir;
  SmallIdx s = write_small_idx(dir, 6, 2, 2, true);  // labels 0 3 6 9 2 5
  s.spec.take = 3;
  const Dataset ds = load_dataset(s.spec);
  CHECK(ds.count == 3);
  CHECK(ds.pixels == Bytes(s.pixels.begin(), s.pixels.begin() + 12));
  CHECK(ds.labels == std::vector<int32_t>{0, 3, 6});
  CHECK(ds.max_label == 6);
  CHECK(ds.max_label_index == 2);
  CHECK(probe_dataset(s.spec).count == 3);

  s.spec.take = 100;  // more than there is: all of it
  CHECK(load_dataset(s.spec).count == 6);
  s.spec.take = -1;
  CHECK_THROWS_AS(load_dataset(s.spec), ConfigError);
}

TEST_CASE("idx: a truncated images file is an IoError that gives the sizes") {
  TempDir dir;
  for (bool gz : {false, true}) {
    SmallIdx s = write_small_idx(dir, 3, 4, 4, gz);
    Bytes bytes = idx_images(3, 4, 4, s.pixels);
    bytes.resize(bytes.size() - 10);  // 48 pixel bytes announced, 38 present
    (gz ? write_gz : write_plain)(s.spec.images, bytes);
    const std::string what = error_of<IoError>([&] { load_dataset(s.spec); });
    CHECK_THAT(what, Contains("data.train.images: '" + s.spec.images + "' is truncated"));
    CHECK_THAT(what, Contains("announces 3 images of 4x4 (48 bytes) but only 38 bytes follow"));
    CHECK_THROWS_AS(probe_dataset(s.spec), IoError);
  }
}

TEST_CASE("idx: a gzip stream cut short is an IoError") {
  TempDir dir;
  SmallIdx s = write_small_idx(dir, 50, 8, 8, true);
  Bytes gz = read_all(s.spec.images);
  gz.resize(gz.size() / 2);
  write_plain(s.spec.images, gz);
  const std::string what = error_of<IoError>([&] { load_dataset(s.spec); });
  CHECK_THAT(what, Contains("data.train.images: '" + s.spec.images + "'"));
  CHECK_THAT(what, Contains("truncated"));
  CHECK_THROWS_AS(probe_dataset(s.spec), IoError);
}

TEST_CASE("idx: bytes after the announced data are an IoError") {
  TempDir dir;
  for (bool gz : {false, true}) {
    SmallIdx s = write_small_idx(dir, 3, 2, 2, gz);
    Bytes labels = idx_labels(3, s.labels);
    labels.push_back(7);
    labels.push_back(7);
    (gz ? write_gz : write_plain)(s.spec.labels, labels);
    const std::string what = error_of<IoError>([&] { load_dataset(s.spec); });
    CHECK_THAT(what, Contains("data.train.labels: '" + s.spec.labels + "' has 2 bytes after the 3"));
    CHECK_THROWS_AS(probe_dataset(s.spec), IoError);
  }
}

TEST_CASE("idx: a bad magic number says what was expected") {
  TempDir dir;
  SmallIdx s = write_small_idx(dir, 2, 2, 2, false);
  const Bytes good_images = read_all(s.spec.images);
  const Bytes good_labels = read_all(s.spec.labels);

  write_plain(s.spec.images, Bytes{'<', 'h', 't', 'm', 'l', '>', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  std::string what = error_of<IoError>([&] { load_dataset(s.spec); });
  CHECK_THAT(what, Contains("data.train.images: '" + s.spec.images + "'"));
  CHECK_THAT(what, Contains("0x3c68746d"));
  CHECK_THAT(what, Contains("expected 0x00000803"));
  CHECK_THAT(what, Contains("may not be an IDX file"));

  write_plain(s.spec.images, good_images);
  Bytes labels = good_labels;
  labels[3] = 0x02;  // 0x00000802: two dimensions
  write_plain(s.spec.labels, labels);
  what = error_of<IoError>([&] { load_dataset(s.spec); });
  CHECK_THAT(what, Contains("data.train.labels:"));
  CHECK_THAT(what, Contains("expected 0x00000801"));

  // Files swapped in the config.
  write_plain(s.spec.labels, good_labels);
  data::DataSourceSpec swapped = s.spec;
  std::swap(swapped.images, swapped.labels);
  what = error_of<IoError>([&] { load_dataset(swapped); });
  CHECK_THAT(what, Contains("swapped"));

  // Too short for a magic number.
  write_plain(s.spec.images, Bytes{0, 0});
  CHECK_THROWS_AS(load_dataset(s.spec), IoError);
}

TEST_CASE("idx: different image and label counts are an IoError naming both files") {
  TempDir dir;
  SmallIdx s = write_small_idx(dir, 5, 2, 2, false);
  write_plain(s.spec.labels, idx_labels(4, Bytes(s.labels.begin(), s.labels.begin() + 4)));
  const std::string what = error_of<IoError>([&] { load_dataset(s.spec); });
  CHECK_THAT(what, Contains("data.train: 5 images but 4 labels ('" + s.spec.images + "' vs '" +
                            s.spec.labels + "')"));
  CHECK_THROWS_AS(probe_dataset(s.spec), IoError);
}

TEST_CASE("idx: a missing file is an IoError with the path and a fix") {
  TempDir dir;
  SmallIdx s = write_small_idx(dir, 2, 2, 2, true);
  s.spec.labels = dir.file("nope/labels.gz");
  const std::string what = error_of<IoError>([&] { load_dataset(s.spec); });
  CHECK_THAT(what, Contains("data.train.labels: cannot open '" + s.spec.labels + "'"));
  CHECK_THAT(what, Contains("No such file or directory"));
  CHECK_THAT(what, Contains("scripts/install-deps.sh"));
  try {
    probe_dataset(s.spec);
    FAIL("no exception");
  } catch (const Error& e) {
    CHECK(e.exit_code() == ExitCode::kData);
  }
  s.spec.images = "";
  CHECK_THROWS_AS(load_dataset(s.spec), ConfigError);
}

TEST_CASE("dataset: an unknown format is a ConfigError that suggests the right one, a missing one too") {
  const std::string what = error_of<ConfigError>([&] { data::data_format("idy"); });
  CHECK_THAT(what, Contains("unknown data format 'idy'"));
  CHECK_THAT(what, Contains("did you mean 'idx'"));
  data::DataSourceSpec spec;
  spec.path = "data.test";
  CHECK_THAT(error_of<ConfigError>([&] { load_dataset(spec); }), Contains("data.test.format: missing"));
  CHECK_THROWS_AS(probe_dataset(spec), ConfigError);
}

TEST_CASE("idx: probe_dataset matches load_dataset, plain and gzip") {
  TempDir dir;
  for (bool gz : {false, true}) {
    const SmallIdx s = write_small_idx(dir, 9, 3, 7, gz);
    const DatasetInfo info = probe_dataset(s.spec);
    const Dataset ds = load_dataset(s.spec);
    CHECK(info.count == ds.count);
    CHECK(info.sample_shape == ds.sample_shape);
  }
}

TEST_CASE("idx: the real Fashion-MNIST loads with 60000 + 10000 samples of ten classes") {
  const std::string root = "/usr/share/datasets/fashion-mnist/";
  for (const std::string set : {"train", "t10k"}) {
    data::DataSourceSpec spec;
    spec.path = "data." + set;
    spec.format = &data::data_format("idx");
    spec.images = root + set + "-images-idx3-ubyte.gz";
    spec.labels = root + set + "-labels-idx1-ubyte.gz";
    INFO("Fashion-MNIST must be installed at " << root << " (run scripts/install-deps.sh)");
    REQUIRE(std::filesystem::exists(spec.images));
    REQUIRE(std::filesystem::exists(spec.labels));
    const int64_t expected = set == "train" ? 60000 : 10000;
    const DatasetInfo info = probe_dataset(spec);
    CHECK(info.count == expected);
    CHECK(info.sample_shape == Shape{28, 28, 1});
    const Dataset ds = load_dataset(spec);
    CHECK(ds.count == expected);
    CHECK(ds.sample_shape == Shape{28, 28, 1});
    CHECK(ds.pixels.size() == static_cast<size_t>(expected * 784));
    CHECK(ds.max_label == 9);
    std::set<int32_t> classes(ds.labels.begin(), ds.labels.end());
    CHECK(classes.size() == 10);
    CHECK(*classes.begin() == 0);
    // Not all black: the images carry data.
    uint64_t sum = 0;
    for (uint8_t p : ds.pixels) sum += p;
    CHECK(sum > static_cast<uint64_t>(expected) * 784 * 20);
  }
}
