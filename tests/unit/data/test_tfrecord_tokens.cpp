// The tfrecord format's token windows (`sequence_length`): TensorFlow's own file of
// tokenised records (tests/fixtures/tfrecord/tokens.tfrecord, made by
// tests/fixtures/make_tf_fixtures.py: short fortunes, their bytes as int64_list
// `input_ids`) read as one stream in record order and windowed exactly as
// fixtures.json says and as a text source windows the same text (strides, the
// validation split, take, shards and shuffles: the same batches); ids wider than a
// byte; where each token came from; the keys; and the errors (a missing feature, a
// feature of another kind, ids outside [0, 2^24), too little data, no ids).
#include <catch2/catch.hpp>

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "config/section.h"
#include "core/error.h"
#include "data/data_spec.h"
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

using testing::load_error;
const std::string& kFixtures = testing::kTfFixtures;
const std::string kTokens = kFixtures + "tokens.tfrecord";

nlohmann::json token_facts() { return testing::tf_fixture_facts("tokens.tfrecord"); }

// The fixture's records' texts, concatenated: the token stream (each byte an id).
std::string fixture_stream() {
  const nlohmann::json facts = token_facts();
  std::string stream;
  for (const auto& text : facts.at("texts")) stream += text.get<std::string>();
  return stream;
}

DataSourceSpec tokens_spec(std::vector<std::string> files, int64_t sequence_length, int64_t stride = 0) {
  return testing::windows_spec("tfrecord", std::move(files), sequence_length, stride);
}

std::vector<int64_t> sample_of(const Dataset& ds, int64_t i) {
  std::vector<float> x(static_cast<size_t>(ds.sample_numel()));
  ds.copy_sample(i, x.data());
  return std::vector<int64_t>(x.begin(), x.end());
}

std::vector<int64_t> labels_of(const Dataset& ds, int64_t i) {
  std::vector<int32_t> y(static_cast<size_t>(ds.label_width));
  ds.copy_labels(i, y.data());
  return std::vector<int64_t>(y.begin(), y.end());
}

// An epoch's batches (labels, samples) of one of two workers' shards of `ds`, shuffled.
std::vector<std::pair<std::vector<int32_t>, std::vector<float>>> epoch_batches(std::shared_ptr<Dataset> ds,
                                                                               int64_t shard) {
  PipelineOptions o;
  o.batch_size = 4;
  o.shuffle_buffer = 50;
  o.shard_count = 2;
  o.shard_index = shard;
  Pipeline pipeline(std::move(ds), o);
  pipeline.start_epoch(1);
  std::vector<std::pair<std::vector<int32_t>, std::vector<float>>> batches;
  for (Batch b; pipeline.next(b);)
    batches.emplace_back(b.labels, std::vector<float>(b.images.data(), b.images.data() + b.images.numel()));
  return batches;
}

// The ids of stream[begin, begin + n).
std::vector<int64_t> ids_of(const std::string& stream, int64_t begin, int64_t n) {
  std::vector<int64_t> ids;
  for (int64_t k = begin; k < begin + n; ++k) ids.push_back(static_cast<uint8_t>(stream[static_cast<size_t>(k)]));
  return ids;
}

// A file of tf.train.Examples, each with an `input_ids` int64_list of the given ids.
std::string write_id_records(const TempDir& dir, const std::string& name, const std::vector<std::vector<int64_t>>& records) {
  TfRecordWriter writer(dir.file(name), "test");
  for (const auto& ids : records)
    writer.write(testing::example_of({testing::example_feature("input_ids", 3, testing::int64_list(ids))}));
  writer.close();
  return dir.file(name);
}

}  // namespace

TEST_CASE("tfrecord tokens: TensorFlow's records are one stream, in windows of sequence_length + 1", "[tfrecord]") {
  const nlohmann::json facts = token_facts();
  const nlohmann::json& w = facts.at("windows");
  const Dataset ds = load_dataset(tokens_spec({kTokens}, w.at("sequence_length"), w.at("stride")));
  REQUIRE(ds.count == w.at("count").get<int64_t>());
  CHECK(ds.sample_shape == Shape{32});
  CHECK(ds.label_width == 32);
  CHECK(ds.corpus.empty());  // ids are held as int32, however small
  CHECK_FALSE(ds.token_ids.empty());
  CHECK(sample_of(ds, 0) == w.at("first_sample").get<std::vector<int64_t>>());
  CHECK(labels_of(ds, 0) == w.at("first_labels").get<std::vector<int64_t>>());
  CHECK(sample_of(ds, ds.count - 1) == w.at("last_sample").get<std::vector<int64_t>>());
  CHECK(labels_of(ds, ds.count - 1) == w.at("last_labels").get<std::vector<int64_t>>());
  // Every window: record 1 (32 ids) is shorter than a window and is packed with its neighbours.
  const std::string stream = fixture_stream();
  REQUIRE(static_cast<int64_t>(stream.size()) == facts.at("total_tokens").get<int64_t>());
  CHECK(facts.at("lengths")[1] == 32);
  for (int64_t i = 0; i < ds.count; ++i) {
    INFO("window " << i);
    CHECK(sample_of(ds, i) == ids_of(stream, i * 32, 32));
    CHECK(labels_of(ds, i) == ids_of(stream, i * 32 + 1, 32));
  }
  CHECK(probe_dataset(tokens_spec({kTokens}, 32)).count == ds.count);
  CHECK(probe_dataset(tokens_spec({kTokens}, 32)).label_width == 32);
}

TEST_CASE("tfrecord tokens window like a text source of the same text: strides, split, take, batches",
          "[tfrecord]") {
  TempDir dir;
  const std::string text_file = dir.write("fortunes.txt", fixture_stream());
  struct Case {
    int64_t sequence_length, stride;
    double split;
    std::string subset;
    int64_t take;
  };
  for (const Case& c : {Case{16, 0, 0.0, "", 0}, Case{8, 3, 0.0, "", 0}, Case{8, 1, 0.0, "", 40},
                        Case{16, 5, 0.2, "training", 0}, Case{16, 5, 0.2, "validation", 0}}) {
    INFO("sequence_length " << c.sequence_length << ", stride " << c.stride << ", split " << c.split << " "
                            << c.subset << ", take " << c.take);
    DataSourceSpec tokens = tokens_spec({kTokens}, c.sequence_length, c.stride);
    DataSourceSpec text = tokens;
    text.format = &data_format("text");
    text.files = {text_file};
    for (DataSourceSpec* spec : {&tokens, &text}) {
      spec->validation_split = c.split;
      spec->subset = c.subset;
      spec->take = c.take;
    }
    auto a = std::make_shared<Dataset>(load_dataset(tokens));
    auto b = std::make_shared<Dataset>(load_dataset(text));
    REQUIRE(a->count == b->count);
    CHECK(a->corpus_size() == b->corpus_size());
    CHECK(a->label_width == c.sequence_length);
    CHECK(a->max_label == b->max_label);
    CHECK(probe_dataset(tokens).count == a->count);
    for (int64_t i = 0; i < a->count; ++i) {
      CHECK(sample_of(*a, i) == sample_of(*b, i));
      CHECK(labels_of(*a, i) == labels_of(*b, i));
    }
    // Shards of two workers, shuffled, batched: the same batches.
    for (int64_t shard = 0; shard < 2; ++shard) {
      const auto batches = epoch_batches(a, shard);
      CHECK_FALSE(batches.empty());
      CHECK(batches == epoch_batches(b, shard));
    }
  }
}

TEST_CASE("tfrecord tokens: ids wider than a byte, exact, and where each token came from", "[tfrecord]") {
  TempDir dir;
  const std::string a = write_id_records(dir, "a.tfrecord", {{50000, 1, 70000}, {}, {2, 3}});
  const std::string b = write_id_records(dir, "b.tfrecord", {{16777215, 4, 5, 6}});
  const Dataset ds = load_dataset(tokens_spec({a, b}, 3, 1));
  REQUIRE(ds.count == 9 - 3);
  CHECK(sample_of(ds, 0) == std::vector<int64_t>{50000, 1, 70000});
  CHECK(labels_of(ds, 0) == std::vector<int64_t>{1, 70000, 2});
  CHECK(sample_of(ds, 3) == std::vector<int64_t>{2, 3, 16777215});
  CHECK(ds.max_label == 16777215);
  const Dataset::TokenAt input = ds.largest_token(/*labels=*/false);
  CHECK(input.id == 16777215);
  CHECK(input.position == 5);
  CHECK(input.sample == 3);
  CHECK(ds.largest_token(/*labels=*/true).sample == 2);
  REQUIRE(ds.token_origin);
  // The empty record 1 holds no token: token 3 is record 2's first.
  CHECK(ds.token_origin(2) == "data.train.files[0]: '" + a + "' record 0 (byte offset 0), token 2 of 'input_ids'");
  CHECK_THAT(ds.token_origin(3), Contains("a.tfrecord' record 2 (byte offset ") && Contains("token 0 of"));
  CHECK_THAT(ds.token_origin(6), Contains("data.train.files[1]: '" + b + "' record 0") && Contains("token 1 of"));
  // A validation subset counts its tokens from its own start.
  DataSourceSpec split = tokens_spec({a, b}, 2, 1);
  split.validation_split = 0.4;  // the last 3 of 9 tokens: 4, 5, 6 of b.tfrecord
  split.subset = "validation";
  const Dataset held_out = load_dataset(split);
  CHECK(sample_of(held_out, 0) == std::vector<int64_t>{4, 5});
  CHECK_THAT(held_out.token_origin(0), Contains("b.tfrecord' record 0") && Contains("token 1 of 'input_ids'"));
}

TEST_CASE("tfrecord tokens: errors name the file, the record, the feature and how to fix it", "[tfrecord]") {
  // Image records have no token ids.
  DataSourceSpec spec = tokens_spec({kFixtures + "fashion_bytes.tfrecord"}, 8);
  CHECK_THROWS_AS(load_dataset(spec), IoError);
  CHECK_THAT(load_error(spec), Contains("data.train.files[0]") && Contains("fashion_bytes.tfrecord") &&
                                 Contains("record 0 (byte offset 0) has no feature 'input_ids' (it has: image, "
                                          "label); set tokens_key"));
  // A feature of another kind (TensorFlow's float_list and bytes_list).
  spec = tokens_spec({kFixtures + "fashion_floats.tfrecord"}, 8);
  spec.tokens_key = "image";
  CHECK_THAT(load_error(spec), Contains("record 0 (byte offset 0) feature 'image' is a float_list; expected an "
                                      "int64_list of token ids"));
  spec.tokens_key = "id";
  CHECK_THAT(load_error(spec), Contains("feature 'id' is a bytes_list; expected an int64_list"));
  // Another int64_list of the fixture loads as well (attention_mask: all ones).
  spec = tokens_spec({kTokens}, 8);
  spec.tokens_key = "attention_mask";
  CHECK(load_dataset(spec).max_label == 1);

  // Ids outside [0, 2^24).
  TempDir dir;
  spec = tokens_spec({write_id_records(dir, "negative.tfrecord", {{1, 2, 3}, {4, 5, -1}})}, 2);
  CHECK_THROWS_AS(load_dataset(spec), IoError);
  CHECK_THAT(load_error(spec), Contains("negative.tfrecord' record 1 (byte offset 40) feature 'input_ids' holds token "
                                      "id -1 at position 2; token ids must be 0 to 16777215"));
  spec = tokens_spec({write_id_records(dir, "huge.tfrecord", {{1, 16777216, 3}})}, 2);
  CHECK_THAT(load_error(spec), Contains("holds token id 16777216 at position 1") && Contains("float32"));

  // Too little data: the whole stream, or the subset, shorter than one window.
  spec = tokens_spec({kTokens}, 374);
  CHECK_THROWS_AS(load_dataset(spec), ConfigError);
  CHECK_THAT(load_error(spec), Contains("data.train.sequence_length: 374 needs windows of 375 tokens (the tokens and "
                                      "the next one), but the corpus has 374 tokens; use a shorter sequence_length "
                                      "or more records"));
  CHECK(load_dataset(tokens_spec({kTokens}, 373)).count == 1);
  spec = tokens_spec({kTokens}, 64);
  spec.validation_split = 0.1;
  spec.subset = "validation";
  CHECK_THAT(load_error(spec), Contains("the validation subset has 37 tokens (of 374)") &&
                                 Contains("another validation_split"));
  CHECK_THROWS_AS(probe_dataset(spec), ConfigError);

  // No ids at all, no records, no files.
  CHECK_THAT(load_error(tokens_spec({write_id_records(dir, "empty.tfrecord", {{}, {}})}, 2)),
             Contains("the 2 record(s) hold no token ids (every 'input_ids' is empty)"));
  CHECK_THAT(load_error(tokens_spec({write_id_records(dir, "none.tfrecord", {})}, 2)), Contains("but no records"));
  CHECK_THAT(load_error(tokens_spec({}, 2)), Contains("data.train.files: missing"));
  // The window keys are checked as a text source's.
  spec = tokens_spec({kTokens}, 8);
  spec.validation_split = 0.5;
  CHECK_THAT(load_error(spec), Contains("data.train.subset: missing"));
}

TEST_CASE("tfrecord tokens: the keys, and the image keys refused with them", "[tfrecord]") {
  const auto read = [](const std::string& source) {
    const config::Document doc(R"({"train": )" + source + "}", "job.json");
    return read_data_spec(doc.root());
  };
  const DataSpec spec = read(R"({"format": "tfrecord", "files": ["t-*.tfrecord"], "sequence_length": 64,
                                 "stride": 16, "validation_split": 0.1, "subset": "training", "take": 5})");
  CHECK(spec.train.token_windows());
  CHECK(spec.train.tokens_key == "input_ids");
  CHECK(spec.train.sequence_length == 64);
  CHECK(spec.train.stride == 16);
  CHECK(spec.train.validation_split == 0.1);
  CHECK(spec.train.subset == "training");
  CHECK(spec.train.take == 5);
  CHECK(read(R"({"format": "tfrecord", "files": ["t"], "sequence_length": 8, "tokens_key": "ids"})").train.tokens_key ==
        "ids");
  CHECK_FALSE(read(R"({"format": "tfrecord", "files": ["t"]})").train.token_windows());
  CHECK_THROWS_AS(read(R"({"format": "tfrecord", "files": ["t"], "sequence_length": 8, "image_key": "x"})"),
                  ConfigError);
  CHECK_THROWS_WITH(read(R"({"format": "tfrecord", "files": ["t"], "sequence_length": 8, "image_key": "x"})"),
                    Contains("train.image_key: ") && Contains("reads token ids (sequence_length is set)"));
  CHECK_THROWS_WITH(read(R"({"format": "tfrecord", "files": ["t"], "sequence_length": 8, "shape": [8]})"),
                    Contains("train.shape: "));
  CHECK_THROWS_WITH(read(R"({"format": "tfrecord", "files": ["t"], "tokens_key": "input_ids"})"),
                    Contains("train.tokens_key: ") && Contains("set sequence_length"));
  CHECK_THROWS_WITH(read(R"({"format": "tfrecord", "files": ["t"], "stride": 4})"), Contains("train.stride: "));
  CHECK_THROWS_WITH(read(R"({"format": "tfrecord", "files": ["t"], "sequence_length": 0})"),
                    Contains("sequence_length"));
  CHECK_THROWS_WITH(read(R"({"format": "tfrecord", "files": ["t"], "sequence_length": 8, "subset": "train"})"),
                    Contains("subset"));
}
