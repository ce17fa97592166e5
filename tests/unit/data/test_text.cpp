// The text format: byte tokens in windows of sequence_length + 1 (the labels are
// the samples shifted by one), stride, files in order (globs, exclude), the
// validation split (disjoint subsets, no window across the cut), take, sharding
// and batching with T labels per sample, the corpus held once however small the
// stride, and the errors (missing files, binary files, links, an empty or too
// short corpus, inconsistent keys). Also the real fortunes corpus when installed.
#include <catch2/catch.hpp>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "config/section.h"
#include "core/error.h"
#include "data/data_spec.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "data_test_util.h"
#include "support/temp_dir.h"

using namespace dtrain;
using namespace dtrain::data;
using Catch::Matchers::Contains;
using test::TempDir;

namespace {

DataSourceSpec text_spec(std::vector<std::string> files, int64_t sequence_length, int64_t stride = 0) {
  return testing::windows_spec("text", std::move(files), sequence_length, stride);
}

// Sample i's tokens and labels as strings (the bytes they are).
std::string tokens_of(const Dataset& ds, int64_t i) {
  std::vector<float> x(static_cast<size_t>(ds.sample_numel()));
  ds.copy_sample(i, x.data());
  std::string out;
  for (float v : x) out.push_back(static_cast<char>(static_cast<int>(v)));
  return out;
}

std::string labels_of(const Dataset& ds, int64_t i) {
  std::vector<int32_t> y(static_cast<size_t>(ds.label_width));
  ds.copy_labels(i, y.data());
  return std::string(y.begin(), y.end());
}

// The corpus "\x01\x02...\x64": 100 distinct ASCII bytes, so a window's bytes say where it lies.
std::string distinct_bytes(int n) {
  std::string s;
  for (int i = 1; i <= n; ++i) s.push_back(static_cast<char>(i));
  return s;
}

using testing::load_error;

}  // namespace

TEST_CASE("text: windows of sequence_length + 1 bytes, the labels are the tokens shifted by one") {
  TempDir dir;
  const Dataset ds = load_dataset(text_spec({dir.write("a.txt", "abcdefghij")}, 3));
  REQUIRE(ds.count == 3);  // windows at 0, 3, 6 (the one at 9 would need 4 bytes)
  CHECK(ds.sample_shape == Shape{3});
  CHECK(ds.label_width == 3);
  CHECK(tokens_of(ds, 0) == "abc");
  CHECK(labels_of(ds, 0) == "bcd");
  CHECK(tokens_of(ds, 1) == "def");
  CHECK(labels_of(ds, 1) == "efg");
  CHECK(tokens_of(ds, 2) == "ghi");
  CHECK(labels_of(ds, 2) == "hij");
  CHECK(ds.max_label == 'j');
  CHECK(ds.max_label_index == 2);
  CHECK(probe_dataset(text_spec({dir.file("a.txt")}, 3)).count == 3);
}

TEST_CASE("text: the stride sets the windows' starts, the corpus is held once however small it is") {
  TempDir dir;
  const std::string text = distinct_bytes(100);
  const Dataset ds = load_dataset(text_spec({dir.write("a.txt", text)}, 8, 1));
  REQUIRE(ds.count == 100 - 9 + 1);
  for (int64_t i = 0; i < ds.count; ++i) {
    CHECK(tokens_of(ds, i) == text.substr(static_cast<size_t>(i), 8));
    CHECK(labels_of(ds, i) == text.substr(static_cast<size_t>(i) + 1, 8));
  }
  CHECK(ds.corpus.size() == 100);
  CHECK(ds.values.empty());
  CHECK(ds.labels.empty());
  // Caching decodes nothing: the samples stay windows of the bytes.
  auto shared = std::make_shared<Dataset>(ds);
  PipelineOptions o;
  o.batch_size = 16;
  o.cache = true;
  Pipeline p(shared, o);
  CHECK(shared->values.empty());
  CHECK(shared->corpus.size() == 100);

  const Dataset wide = load_dataset(text_spec({dir.file("a.txt")}, 4, 7));
  CHECK(wide.count == (100 - 5) / 7 + 1);
  CHECK(tokens_of(wide, 2) == text.substr(14, 4));
  CHECK(labels_of(wide, 2) == text.substr(15, 4));
}

TEST_CASE("text: files are concatenated in order, globs sorted, exclude leaves names out") {
  TempDir dir;
  dir.write("b", "45678");
  dir.write("a", "0123");
  dir.write("a.dat", std::string("\0\0\0\2", 4));
  DataSourceSpec spec = text_spec({dir.file("*")}, 8);
  spec.exclude = {"*.dat"};
  const Dataset ds = load_dataset(spec);
  REQUIRE(ds.count == 1);
  CHECK(tokens_of(ds, 0) == "01234567");
  CHECK(labels_of(ds, 0) == "12345678");
  // Listed explicitly, the order is the list's.
  const Dataset reversed = load_dataset(text_spec({dir.file("b"), dir.file("a")}, 8));
  CHECK(tokens_of(reversed, 0) == "45678012");
}

TEST_CASE("text: the validation split is the corpus' end, disjoint from the training windows") {
  TempDir dir;
  const std::string text = distinct_bytes(100);
  DataSourceSpec train = text_spec({dir.write("a.txt", text)}, 4, 1);
  train.validation_split = 0.2;
  train.subset = "training";
  DataSourceSpec validation = train;
  validation.path = "data.test";
  validation.subset = "validation";
  const Dataset t = load_dataset(train);
  const Dataset v = load_dataset(validation);
  CHECK(t.count == 80 - 5 + 1);
  CHECK(v.count == 20 - 5 + 1);
  std::set<char> seen_in_training;
  for (int64_t i = 0; i < t.count; ++i)
    for (const char c : tokens_of(t, i) + labels_of(t, i)) seen_in_training.insert(c);
  CHECK(*seen_in_training.rbegin() == text[79]);  // no window crosses the cut
  for (int64_t i = 0; i < v.count; ++i)
    for (const char c : tokens_of(v, i) + labels_of(v, i)) {
      INFO("validation window " << i);
      CHECK(seen_in_training.count(c) == 0);
    }
  CHECK(tokens_of(v, 0) == text.substr(80, 4));
  CHECK(labels_of(v, v.count - 1) == text.substr(96, 4));
}

TEST_CASE("text: take keeps the first windows") {
  TempDir dir;
  DataSourceSpec spec = text_spec({dir.write("a.txt", distinct_bytes(50))}, 4);
  spec.take = 3;
  const Dataset ds = load_dataset(spec);
  CHECK(ds.count == 3);
  CHECK(tokens_of(ds, 2) == distinct_bytes(50).substr(8, 4));
  CHECK(probe_dataset(spec).count == 3);
  CHECK_THROWS(ds.copy_sample(3, std::vector<float>(4).data()));
}

TEST_CASE("text: batches carry T labels per sample, shards and shuffles keep them with their samples") {
  TempDir dir;
  const std::string text = distinct_bytes(120);
  auto ds = std::make_shared<Dataset>(load_dataset(text_spec({dir.write("a.txt", text)}, 5, 2)));
  REQUIRE(ds->count == (120 - 6) / 2 + 1);
  std::set<int> starts_seen;
  for (int64_t shard = 0; shard < 2; ++shard) {
    PipelineOptions o;
    o.batch_size = 4;
    o.shuffle_buffer = 100;
    o.seed = 3;
    o.shard_count = 2;
    o.shard_index = shard;
    o.prefetch = shard;  // with and without the prefetch thread
    Pipeline p(ds, o);
    p.start_epoch(1);
    Batch b;
    while (p.next(b)) {
      CHECK(b.label_width == 5);
      CHECK(b.size() == b.images.dim(0));
      REQUIRE(static_cast<int64_t>(b.labels.size()) == b.size() * 5);
      for (int64_t k = 0; k < b.size(); ++k) {
        const float* x = b.images.data() + k * 5;
        for (int64_t t = 0; t < 5; ++t) {
          // Token t + 1 of a window is label t: the labels are this sample's own.
          if (t + 1 < 5) CHECK(b.labels[static_cast<size_t>(k * 5 + t)] == static_cast<int32_t>(x[t + 1]));
          CHECK(b.labels[static_cast<size_t>(k * 5 + t)] == static_cast<int32_t>(x[t]) + 1);
        }
        CHECK(starts_seen.insert(static_cast<int>(x[0])).second);  // shards are disjoint
      }
      // A slice keeps each sample's labels together.
      if (b.size() >= 2) {
        const Batch second = b.slice(1, 1);
        CHECK(second.size() == 1);
        CHECK(second.labels == std::vector<int32_t>(b.labels.begin() + 5, b.labels.begin() + 10));
        CHECK(b.sample_labels(1, 1) == second.labels);
      }
    }
  }
  CHECK(static_cast<int64_t>(starts_seen.size()) == ds->count / 2 * 2);
}

TEST_CASE("text: errors name the key or file and say how to fix it") {
  TempDir dir;
  CHECK_THROWS_AS(load_dataset(text_spec({dir.file("missing.txt")}, 4)), IoError);
  CHECK_THAT(load_error(text_spec({dir.file("missing.txt")}, 4)), Contains("data.train.files") && Contains("missing.txt"));
  CHECK_THAT(load_error(text_spec({dir.file("nothing-*")}, 4)), Contains("matches no file"));
  CHECK_THAT(load_error(text_spec({dir.write("empty.txt", "")}, 4)), Contains("the corpus is empty"));
  const std::string short_file = dir.write("short.txt", "abcd");
  CHECK_THROWS_AS(load_dataset(text_spec({short_file}, 4)), ConfigError);
  CHECK_THAT(load_error(text_spec({short_file}, 4)),
             Contains("data.train.sequence_length: 4 needs windows of 5 bytes") && Contains("has 4 bytes"));
  CHECK(load_dataset(text_spec({short_file}, 3)).count == 1);
  CHECK_THAT(load_error(text_spec({short_file}, 0)), Contains("data.train.sequence_length: must be >= 1"));
  CHECK_THAT(load_error(text_spec({}, 4)), Contains("data.train.files: missing"));

  // A binary file (a fortune .dat index), and a file that is not UTF-8.
  const std::string binary = dir.write("cookie.dat", std::string("abc\0\0\0\2xyz", 10));
  CHECK_THROWS_AS(load_dataset(text_spec({binary}, 2)), IoError);
  CHECK_THAT(load_error(text_spec({binary}, 2)),
             Contains("cookie.dat") && Contains("NUL byte at byte 3") && Contains("exclude") && Contains("*.dat"));
  CHECK_THAT(load_error(text_spec({dir.write("latin1.txt", "caf\xe9 au lait")}, 2)),
             Contains("is not UTF-8 text at byte 3 (0xe9)"));
  CHECK(load_dataset(text_spec({dir.write("utf8.txt", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80")}, 2)).count > 0);

  // A link to a file already read (fortune's .u8 files) would repeat its text.
  const std::string text = dir.write("art", "some art, some more art");
  std::filesystem::create_symlink(text, dir.file("art.u8"));
  CHECK_THAT(load_error(text_spec({dir.file("ar*")}, 2)),
             Contains("art.u8' is the same file as") && Contains("\"*.u8\""));
  DataSourceSpec excluded = text_spec({dir.file("ar*")}, 2);
  excluded.exclude = {"*.u8"};
  CHECK(load_dataset(excluded).count == 11);
  excluded.exclude = {"*"};
  CHECK_THAT(load_error(excluded), Contains("data.train.exclude: leaves out every file"));

  // The split's keys go together.
  DataSourceSpec split = text_spec({text}, 2);
  split.validation_split = 0.5;
  CHECK_THAT(load_error(split), Contains("data.train.subset: missing") && Contains("\"training\" or \"validation\""));
  split.validation_split = 0.0;
  split.subset = "validation";
  CHECK_THAT(load_error(split), Contains("data.train.subset: \"validation\" needs validation_split > 0"));
  split.validation_split = 0.1;
  split.sequence_length = 4;
  CHECK_THAT(load_error(split), Contains("the validation subset has 2 bytes (of 23)"));
}

TEST_CASE("text: the source's keys are read and checked") {
  const auto read = [](const std::string& source) {
    const config::Document doc(R"({"train": )" + source + "}", "job.json");
    return read_data_spec(doc.root());
  };
  const DataSpec spec = read(R"({"format": "text", "files": ["a", "b*"], "exclude": ["*.dat"], "sequence_length": 64,
                                 "stride": 16, "validation_split": 0.1, "subset": "training", "take": 5})");
  CHECK(spec.train.files == std::vector<std::string>{"a", "b*"});
  CHECK(spec.train.exclude == std::vector<std::string>{"*.dat"});
  CHECK(spec.train.sequence_length == 64);
  CHECK(spec.train.stride == 16);
  CHECK(spec.train.validation_split == 0.1);
  CHECK(spec.train.subset == "training");
  CHECK(spec.train.take == 5);
  CHECK_THROWS_WITH(read(R"({"format": "text", "files": ["a"]})"), Contains("sequence_length"));
  CHECK_THROWS_WITH(read(R"({"format": "text", "files": ["a"], "sequence_length": 0})"), Contains("sequence_length"));
  CHECK_THROWS_WITH(read(R"({"format": "text", "files": ["a"], "sequence_length": 8, "stride": 0})"),
                    Contains("stride"));
  CHECK_THROWS_WITH(read(R"({"format": "text", "files": ["a"], "sequence_length": 8, "validation_split": 1})"),
                    Contains("validation_split"));
  CHECK_THROWS_WITH(read(R"({"format": "text", "files": ["a"], "sequence_length": 8, "subset": "train"})"),
                    Contains("subset"));
  CHECK_THROWS_WITH(read(R"({"format": "text", "files": ["a"], "sequence_length": 8, "shape": [8]})"),
                    Contains("'shape' belongs to"));
}

TEST_CASE("text: the fortunes corpus loads, its .dat and .u8 files excluded") {
  const std::string root = "/usr/share/games/fortunes/";
  INFO("Debian's fortunes must be installed at " << root << " (run scripts/install-deps.sh)");
  REQUIRE(std::filesystem::exists(root + "fortunes"));
  DataSourceSpec spec = text_spec({root + "*"}, 128);
  CHECK_THAT(load_error(spec), Contains("art.u8' is the same file as") && Contains("[\"*.u8\"]"));
  spec.exclude = {"*.u8"};
  CHECK_THAT(load_error(spec), Contains("art.dat' holds a NUL byte") && Contains("[\"*.dat\"]"));
  spec.exclude = {"*.dat", "*.u8"};
  spec.validation_split = 0.1;
  spec.subset = "training";
  const Dataset train = load_dataset(spec);
  spec.subset = "validation";
  const Dataset validation = load_dataset(spec);
  CHECK(train.count > 1000);
  CHECK(validation.count > 100);
  CHECK(train.count > 8 * validation.count);
  CHECK(train.max_label < 256);
  CHECK(train.label_width == 128);
}
