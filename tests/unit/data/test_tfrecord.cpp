// Tests of the TFRecord framing (CRC-32C test vectors, write/read round trips,
// corrupt and truncated files) and of the tfrecord data format on files that
// TensorFlow itself wrote (tests/fixtures/tfrecord, made by
// tests/fixtures/make_tf_fixtures.py): bytes, gzip and float images, other
// feature names, globs, and every kind of bad record.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "data/tfrecord.h"
#include "data_test_util.h"
#include "support/temp_dir.h"

using namespace dtrain;
using namespace dtrain::data;
using Catch::Matchers::Contains;
using test::TempDir;

namespace {

const std::string& kFixtures = testing::kTfFixtures;
using testing::tf_fixture_facts;

DataSourceSpec tfrecord_spec(std::vector<std::string> files) {
  DataSourceSpec spec;
  spec.path = "data.train";
  spec.format = &data_format("tfrecord");
  spec.files = std::move(files);
  spec.shape = {28, 28, 1};
  return spec;
}

// Checks the labels and each image's byte sum against fixtures.json.
void check_against_facts(const Dataset& ds, const std::string& file) {
  const nlohmann::json facts = tf_fixture_facts(file);
  REQUIRE(ds.count == facts.at("records").get<int64_t>());
  const auto labels = facts.at("labels").get<std::vector<int32_t>>();
  CHECK(ds.labels == labels);
  const auto sums = facts.at(facts.contains("pixel_sums_u8") ? "pixel_sums_u8" : "pixel_sums").get<std::vector<int64_t>>();
  std::vector<float> sample(static_cast<size_t>(ds.sample_numel()));
  for (int64_t i = 0; i < ds.count; ++i) {
    ds.copy_sample(i, sample.data());
    double sum = 0.0;
    for (float v : sample) sum += v;
    // Bytes are rescaled by 1/255 and floats were stored as pixel/255: both sum to byte_sum / 255.
    CHECK(sum * 255.0 == Approx(static_cast<double>(sums[static_cast<size_t>(i)])).epsilon(1e-5));
  }
}

// A file of `records` with a few bytes each, written by dtrain's writer.
std::string write_records(const TempDir& dir, const std::string& name, int records, bool gzip = false) {
  TfRecordWriter writer(dir.file(name), "test", gzip);
  for (int r = 0; r < records; ++r) writer.write(std::string(static_cast<size_t>(10 + r), static_cast<char>('a' + r)));
  writer.close();
  return dir.file(name);
}

}  // namespace

TEST_CASE("crc32c matches the standard test vectors", "[tfrecord]") {
  // RFC 3720 appendix B.4 and the common check value of CRC-32C.
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff'), up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  CHECK(crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c(up.data(), 32) == 0x46DD794Eu);
  CHECK(crc32c(down.data(), 32) == 0x113FDB5Cu);
  // TensorFlow's mask: rotate right by 15, add 0xa282ead8.
  const uint32_t c = crc32c("123456789", 9);
  CHECK(masked_crc32c("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("the writer's framing equals TensorFlow's bytes", "[tfrecord]") {
  // The first record of TensorFlow's own file, written again by dtrain, gives the same bytes.
  const std::string tf_file = test::slurp(kFixtures + "fashion_bytes.tfrecord");
  TfRecordReader reader(kFixtures + "fashion_bytes.tfrecord", "test");
  std::string first;
  REQUIRE(reader.next(first));
  TempDir dir;
  TfRecordWriter writer(dir.file("one.tfrecord"), "test");
  writer.write(first);
  writer.close();
  CHECK(test::slurp(dir.file("one.tfrecord")) == tf_file.substr(0, first.size() + 16));
}

TEST_CASE("records round-trip through plain and gzip files", "[tfrecord]") {
  TempDir dir;
  for (bool gzip : {false, true}) {
    const std::string path = write_records(dir, gzip ? "r.tfrecord.gz" : "r.tfrecord", 5, gzip);
    TfRecordReader reader(path, "test");
    CHECK(reader.compressed() == gzip);
    std::string record;
    for (int r = 0; r < 5; ++r) {
      REQUIRE(reader.next(record));
      CHECK(record == std::string(static_cast<size_t>(10 + r), static_cast<char>('a' + r)));
      CHECK(reader.record_index() == r);
    }
    CHECK_FALSE(reader.next(record));
  }
}

TEST_CASE("a corrupt or truncated record names the file and its offset", "[tfrecord]") {
  TempDir dir;
  const std::string path = write_records(dir, "r.tfrecord", 3);
  const std::string good = test::slurp(path);
  std::string record;
  auto read_all = [&](const std::string& p) {
    TfRecordReader reader(p, "data.train.files[0]");
    while (reader.next(record)) {
    }
  };
  // Record 1 starts at 10 + 16 = 26; its data at 38.
  std::string flipped = good;
  flipped[40] ^= 0x01;
  test::spit(path, flipped);
  CHECK_THROWS_AS(read_all(path), IoError);
  CHECK_THROWS_WITH(read_all(path), Contains("r.tfrecord") && Contains("bad data CRC at record 1 (byte offset 26)"));
  std::string bad_length = good;
  bad_length[26] ^= 0x01;
  test::spit(path, bad_length);
  CHECK_THROWS_WITH(read_all(path), Contains("bad length CRC at record 1 (byte offset 26)"));
  test::spit(path, good.substr(0, good.size() - 3));
  CHECK_THROWS_WITH(read_all(path), Contains("ends inside record 2"));
  test::spit(path, good.substr(0, 26 + 5));
  CHECK_THROWS_WITH(read_all(path), Contains("ends inside the header of record 1"));
}

TEST_CASE("tfrecord sources read TensorFlow's files: bytes, gzip, floats, other keys", "[tfrecord]") {
  check_against_facts(load_dataset(tfrecord_spec({kFixtures + "fashion_bytes.tfrecord"})), "fashion_bytes.tfrecord");
  check_against_facts(load_dataset(tfrecord_spec({kFixtures + "fashion_bytes.tfrecord.gz"})),
                      "fashion_bytes.tfrecord.gz");
  const Dataset floats = load_dataset(tfrecord_spec({kFixtures + "fashion_floats.tfrecord"}));
  CHECK(floats.pixels.empty());
  CHECK_FALSE(floats.values.empty());
  check_against_facts(floats, "fashion_floats.tfrecord");
  DataSourceSpec custom = tfrecord_spec({kFixtures + "custom_keys.tfrecord"});
  custom.image_key = "pixels";
  custom.label_key = "class";
  check_against_facts(load_dataset(custom), "custom_keys.tfrecord");
}

TEST_CASE("tfrecord images equal the IDX file TensorFlow wrote them from", "[tfrecord]") {
  DataSourceSpec idx;
  idx.path = "data.train";
  idx.format = &data_format("idx");
  idx.images = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
  idx.labels = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz";
  idx.take = 48;
  const Dataset from_idx = load_dataset(idx);
  const Dataset from_tf = load_dataset(tfrecord_spec({kFixtures + "fashion_bytes.tfrecord.gz"}));
  CHECK(from_tf.pixels == from_idx.pixels);
  CHECK(from_tf.labels == from_idx.labels);
}

TEST_CASE("tfrecord files are globbed in order and checked against compression", "[tfrecord]") {
  DataSourceSpec spec = tfrecord_spec({kFixtures + "fashion_b*.tfrecord*"});
  const auto files = expand_files(spec);
  REQUIRE(files.size() == 2);
  CHECK(files[0] == kFixtures + "fashion_bytes.tfrecord");
  CHECK(files[1] == kFixtures + "fashion_bytes.tfrecord.gz");
  CHECK(load_dataset(spec).count == 96);
  CHECK(probe_dataset(spec).count == 96);
  spec.take = 50;
  CHECK(load_dataset(spec).count == 50);

  const DataSourceSpec none = tfrecord_spec({kFixtures + "nothing-*.tfrecord"});
  CHECK_THROWS_AS(load_dataset(none), IoError);
  CHECK_THROWS_WITH(load_dataset(none), Contains("data.train.files[0]") && Contains("matches no file"));

  DataSourceSpec wrong = tfrecord_spec({kFixtures + "fashion_bytes.tfrecord.gz"});
  wrong.compression = "none";
  CHECK_THROWS_WITH(load_dataset(wrong), Contains("is gzip-compressed") && Contains("compression"));
  wrong = tfrecord_spec({kFixtures + "fashion_bytes.tfrecord"});
  wrong.compression = "gzip";
  CHECK_THROWS_WITH(load_dataset(wrong), Contains("is not gzip-compressed"));
}

TEST_CASE("a bad tf.train.Example names the feature, the record and what was expected", "[tfrecord]") {
  DataSourceSpec spec = tfrecord_spec({kFixtures + "custom_keys.tfrecord"});
  CHECK_THROWS_AS(load_dataset(spec), IoError);
  CHECK_THROWS_WITH(load_dataset(spec), Contains("record 0 (byte offset 0)") && Contains("no feature 'image'") &&
                                            Contains("it has: class, pixels") && Contains("image_key"));
  spec.image_key = "pixels";
  CHECK_THROWS_WITH(load_dataset(spec), Contains("no feature 'label'") && Contains("label_key"));
  spec = tfrecord_spec({kFixtures + "fashion_bytes.tfrecord"});
  spec.shape = {14, 14, 1};
  CHECK_THROWS_WITH(load_dataset(spec), Contains("feature 'image' holds 784 bytes; expected 196"));
  spec = tfrecord_spec({kFixtures + "fashion_floats.tfrecord"});
  spec.label_key = "id";
  CHECK_THROWS_WITH(load_dataset(spec), Contains("feature 'id' is a bytes_list; expected an int64_list"));
  spec = tfrecord_spec({kFixtures + "fashion_bytes.tfrecord", kFixtures + "fashion_floats.tfrecord"});
  CHECK_THROWS_WITH(load_dataset(spec), Contains("data.train.files[1]") && Contains("is a float_list, but record 0"));

  TempDir dir;
  const std::string not_example = write_records(dir, "text.tfrecord", 1);
  spec = tfrecord_spec({not_example});
  CHECK_THROWS_WITH(load_dataset(spec), Contains("is not a tf.train.Example"));
}

TEST_CASE("a streamed tfrecord source gives the in-memory pipeline's batches", "[tfrecord][stream]") {
  // Fashion-MNIST records TensorFlow wrote, each file twice over, bytes (gzip) and
  // floats; streamed (data.cache false) against loaded.
  for (const std::string file : {"fashion_bytes.tfrecord.gz", "fashion_floats.tfrecord"}) {
    DataSourceSpec spec = tfrecord_spec({kFixtures + file, kFixtures + file});
    auto loaded = std::make_shared<Dataset>(load_dataset(spec));
    spec.stream = true;
    auto streamed = std::make_shared<Dataset>(load_dataset(spec));
    REQUIRE(streamed->stream);
    CHECK(streamed->pixels.empty());
    CHECK(streamed->values.empty());
    CHECK(streamed->count == 2 * tf_fixture_facts(file).at("records").get<int64_t>());
    CHECK(streamed->labels == loaded->labels);
    for (const int64_t buffer : {int64_t{0}, int64_t{7}, int64_t{1000}}) {
      for (const int64_t shards : {int64_t{1}, int64_t{3}}) {
        for (const int64_t prefetch : {int64_t{0}, int64_t{2}}) {
          INFO(file << ": shuffle buffer " << buffer << ", " << shards << " shards, prefetch " << prefetch);
          PipelineOptions o;
          o.batch_size = 5;
          o.shuffle_buffer = buffer;
          o.seed = 11;
          o.prefetch = prefetch;
          o.cache = false;
          o.shard_count = shards;
          o.shard_index = shards - 1;
          Pipeline memory(loaded, o), stream(streamed, o);
          for (int64_t epoch = 0; epoch < 2; ++epoch) {
            // Epoch 1 starts at batch 2 (a resumed epoch, or a parameter server's work unit).
            const int64_t first = epoch == 0 ? 0 : std::min<int64_t>(2, memory.batches_per_epoch() - 1);
            memory.start_range(epoch, first, memory.batches_per_epoch());
            stream.start_range(epoch, first, stream.batches_per_epoch());
            Batch a, b;
            int64_t batches = 0;
            while (memory.next(a)) {
              REQUIRE(stream.next(b));
              CHECK(b.index == a.index);
              CHECK(b.labels == a.labels);
              REQUIRE(b.images.numel() == a.images.numel());
              CHECK(std::equal(a.images.data(), a.images.data() + a.images.numel(), b.images.data()));
              ++batches;
            }
            CHECK_FALSE(stream.next(b));
            CHECK(batches == memory.batches_per_epoch() - first);
          }
        }
      }
    }
  }
}

namespace {

// A tf.train.Example with one bytes_list feature per name.
std::string example_with_features(const std::vector<std::string>& names) {
  std::vector<std::string> features;
  for (const std::string& name : names)
    features.push_back(testing::example_feature(name, 1, testing::pb_field(1, "abcd")));
  return testing::example_of(features);
}

}  // namespace

// Found by tests/fuzz/fuzz_tfrecord.cpp (by review, then run through it): a length
// field with a valid CRC made the reader allocate what it promised (up to 2 GiB)
// before it found that the file is shorter.
TEST_CASE("a record length past the end of the file is an IoError, read without allocating it", "[tfrecord]") {
  TempDir dir;
  std::string header(8, '\0');
  const uint64_t length = 0x7fffffff;
  for (int i = 0; i < 8; ++i) header[static_cast<size_t>(i)] = static_cast<char>(length >> (8 * i));
  const uint32_t crc = masked_crc32c(header.data(), header.size());
  for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>(crc >> (8 * i)));
  test::spit(dir.file("long.tfrecord"), header + "abc");
  TfRecordReader reader(dir.file("long.tfrecord"), "data.train.files[0]");
  std::string record;
  CHECK_THROWS_WITH(reader.next(record), Contains("ends inside record 0 (byte offset 0): it should hold 2147483663 bytes "
                                                  "but has 15"));
  CHECK(record.capacity() < (size_t{1} << 30));
}

// Found by tests/fuzz/fuzz_tf_example.cpp: feature names went into the message raw.
TEST_CASE("feature names from the file are quoted escaped and few", "[tfrecord]") {
  TempDir dir;
  std::vector<std::string> names = {"a\x1b[31mb"};
  for (int i = 0; i < 12; ++i) names.push_back(std::string(1, 'f').append(std::to_string(i)));
  {
    TfRecordWriter writer(dir.file("names.tfrecord"), "test");
    writer.write(example_with_features(names));
    writer.close();
  }
  DataSourceSpec spec = tfrecord_spec({dir.file("names.tfrecord")});
  CHECK_THROWS_WITH(load_dataset(spec), Contains("no feature 'image' (it has: a\\x1b[31mb, f0, f1") &&
                                            Contains("and 3 more)"));
}
