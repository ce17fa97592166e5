// TFRecord input end to end with the real binary:
//  - the files TensorFlow wrote (tests/fixtures/tfrecord) train to the same
//    parameters, bit for bit, as the IDX file they were written from;
//  - Fashion-MNIST written as TFRecord shards here (dtrain's writer and the
//    tf.train.Example message) trains like the IDX run, globbed and gzipped;
//  - with data.cache false the shards stream (read each epoch) to the same parameters;
//  - a flipped byte is exit 3 naming the file and the record;
//  - shard_policy file (and auto, with a file per worker) gives each of 2
//    workers its own files under `dtrain launch`;
//  - TensorFlow's tokenised records (tokens.tfrecord: `input_ids`, with
//    sequence_length) train a tiny GPT, reported per token, to the parameters the
//    same text gives as a text source, on one worker and dealt out to two; an id
//    outside the model's vocabulary is exit 2 naming the file and the record.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "data/dataset.h"
#include "data/tfrecord.h"
#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "proto/tf_example.pb.h"

using namespace dtrain::integration;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kFixtures = std::string(DTRAIN_SOURCE_DIR) + "/tests/fixtures/tfrecord/";

json tfrecord_source(const std::vector<std::string>& files) {
  return {{"format", "tfrecord"}, {"files", files}};
}

// The first `count` Fashion-MNIST training samples as `shards` TFRecord files
// (gzip when asked), in order, written with dtrain's writer.
std::vector<std::string> write_fashion_shards(const TempDir& dir, int64_t count, int shards, bool gzip) {
  dtrain::data::DataSourceSpec idx;
  idx.path = "data.train";
  idx.format = &dtrain::data::data_format("idx");
  idx.images = fashion_mnist_file("train-images-idx3-ubyte.gz");
  idx.labels = fashion_mnist_file("train-labels-idx1-ubyte.gz");
  idx.take = count;
  const dtrain::data::Dataset ds = dtrain::data::load_dataset(idx);
  std::vector<std::string> paths;
  const int64_t per_shard = (count + shards - 1) / shards;
  for (int s = 0; s < shards; ++s) {
    paths.push_back(dir.file("train-" + std::to_string(s) + ".tfrecord" + (gzip ? ".gz" : "")));
    dtrain::data::TfRecordWriter writer(paths.back(), "test", gzip);
    for (int64_t i = s * per_shard; i < std::min(count, (s + 1) * per_shard); ++i) {
      dtrain::tf::Example ex;
      auto& features = *ex.mutable_features()->mutable_feature();
      features["image"].mutable_bytes_list()->add_value(
          std::string(reinterpret_cast<const char*>(ds.pixels.data()) + i * 784, 784));
      features["label"].mutable_int64_list()->add_value(ds.labels[static_cast<size_t>(i)]);
      writer.write(ex.SerializeAsString());
    }
    writer.close();
  }
  return paths;
}

json run_summary(const TempDir& dir, const json& job, const std::string& name) {
  const std::string summary = dir.file(name + ".summary.json");
  const RunOutput run =
      run_dtrain({"run", "--config", write_job(dir, job, name + ".json"), "--threads", "1", "--summary", summary},
                 {120.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  return read_json_file(summary);
}

}  // namespace

TEST_CASE("TensorFlow's TFRecord files train to the IDX run's parameters") {
  TempDir dir;
  json idx_job = small_mlp_job(48, 0);
  idx_job["data"].erase("test");
  idx_job["train"]["batch_size_per_replica"] = 16;
  idx_job["train"]["epochs"] = 2;
  json tf_job = idx_job;
  tf_job["data"]["train"] = tfrecord_source({kFixtures + "fashion_bytes.tfrecord.gz"});
  const json a = run_summary(dir, idx_job, "idx");
  const json b = run_summary(dir, tf_job, "tfrecord");
  CHECK(b["params_sha256"] == a["params_sha256"]);
  CHECK(b["train_loss"] == a["train_loss"]);
}

TEST_CASE("Fashion-MNIST as globbed, gzipped TFRecord shards trains like the IDX files") {
  TempDir dir;
  write_fashion_shards(dir, 3000, 3, /*gzip=*/true);
  json idx_job = small_mlp_job(3000, 500);
  json tf_job = idx_job;
  tf_job["data"]["train"] = tfrecord_source({dir.file("train-*.tfrecord.gz")});
  tf_job["data"]["num_parallel_calls"] = 2;
  const json a = run_summary(dir, idx_job, "idx");
  const json b = run_summary(dir, tf_job, "tfrecord");
  CHECK(b["params_sha256"] == a["params_sha256"]);
  CHECK(b["test_accuracy"] == a["test_accuracy"]);
  CHECK(a["test_accuracy"].get<double>() > 0.6);
}

TEST_CASE("with data.cache false the TFRecord shards stream and train to the same parameters") {
  TempDir dir;
  write_fashion_shards(dir, 3000, 3, /*gzip=*/true);
  json job = small_mlp_job(3000, 0);
  job["data"].erase("test");
  job["data"]["train"] = tfrecord_source({dir.file("train-*.tfrecord.gz")});
  job["data"]["shuffle_buffer"] = 500;  // samples wait in the stream's buffer
  job["train"]["epochs"] = 2;
  const json loaded = run_summary(dir, job, "loaded");
  job["data"]["cache"] = false;
  const json streamed = run_summary(dir, job, "streamed");
  CHECK(streamed["params_sha256"] == loaded["params_sha256"]);
  CHECK(streamed["steps"] == loaded["steps"]);
}

TEST_CASE("a flipped byte in a TFRecord file is exit 3 naming the file and the record") {
  TempDir dir;
  std::string bytes = read_file(kFixtures + "fashion_bytes.tfrecord");
  bytes[838 * 5 + 100] ^= 0x20;  // inside record 5's data (each record is 838 bytes)
  const std::string corrupt = dir.write("corrupt.tfrecord", bytes);
  json job = small_mlp_job(48, 0);
  job["data"].erase("test");
  job["data"]["train"] = tfrecord_source({corrupt});
  const RunOutput run = run_dtrain({"run", "--config", write_job(dir, job), "--threads", "1"});
  check_error(run, 3, {"data.train.files[0]", "corrupt.tfrecord", "bad data CRC at record 5 (byte offset 4190)"});

  job["data"]["train"] = tfrecord_source({kFixtures + "custom_keys.tfrecord"});
  const RunOutput keys = run_dtrain({"run", "--config", write_job(dir, job), "--threads", "1"});
  check_error(keys, 3, {"custom_keys.tfrecord", "record 0", "no feature 'image'", "image_key"});
}

TEST_CASE("shard_policy file gives each of 2 workers its own TFRecord files") {
  TempDir dir;
  const auto shards = write_fashion_shards(dir, 200, 4, /*gzip=*/false);
  for (const std::string policy : {"file", "auto"}) {
    json job = small_mlp_job(200, 0);
    job["data"].erase("test");
    job["data"]["train"] = tfrecord_source({dir.file("train-*.tfrecord")});
    job["data"]["shard_policy"] = policy;
    job["train"]["batch_size_per_replica"] = 10;
    job["strategy"] = {{"type", "multi_worker_mirrored"}};
    job["output"] = {{"dir", dir.file("out-" + policy)}};
    const RunOutput run = run_dtrain(
        {"launch", "--workers", "2", "--threads", "1", "--console", "all", "--config", write_job(dir, job, policy + ".json")},
        {120.0, ""});
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    // Worker k reads files k and k + 2: 100 of the 200 samples each, 10 steps of 10.
    CHECK_THAT(run.out, Catch::Matchers::Contains("[worker:0] Data: 100 training samples") &&
                            Catch::Matchers::Contains("[worker:1] Data: 100 training samples"));
  }
}

namespace {

const std::string kTokens = kFixtures + "tokens.tfrecord";

// The fixture's records' texts, concatenated: the text its token ids are the bytes of.
std::string fixture_text() {
  const json facts = read_json_file(kFixtures + "fixtures.json");
  std::string text;
  for (const json& t : facts["files"]["tokens.tfrecord"]["texts"]) text += t.get<std::string>();
  return text;
}

// job_files.h's tiny GPT on `source` (a tfrecord or text source's format and files):
// windows of 16 tokens at a stride of 8, the last 20% held out as data.test; two
// epochs at a batch of 8, output in dir/out-<name>.
json tiny_gpt_on(const TempDir& dir, const json& source, const std::string& name) {
  json job = tiny_gpt_job(dir);
  auto windows = [&](const std::string& subset) {
    json s = source;
    s.update({{"sequence_length", 16}, {"stride", 8}, {"validation_split", 0.2}, {"subset", subset}});
    return s;
  };
  job["data"] = {{"train", windows("training")}, {"test", windows("validation")}, {"shuffle_buffer", 1000}};
  job["train"].erase("steps_per_epoch");
  job["train"]["epochs"] = 2;
  job["train"]["batch_size_per_replica"] = 8;
  job["output"] = {{"dir", dir.file("out-" + name)}};
  return job;
}

}  // namespace

TEST_CASE("a tiny GPT trains on TensorFlow's tokenised records, per token, as on the same text") {
  TempDir dir;
  const json tokens_job = tiny_gpt_on(dir, {{"format", "tfrecord"}, {"files", {kTokens}}}, "tokens");
  const std::string config = write_job(dir, tokens_job, "tokens.json");
  // 374 tokens, 300 before the split: (300 - 17) / 8 + 1 windows; 74 after it: 8.
  const RunOutput validate = run_dtrain({"validate", "--config", config});
  INFO(describe(validate));
  REQUIRE(validate.exit_code == 0);
  CHECK_THAT(validate.out, Catch::Matchers::Contains("data.train: tfrecord, 36 samples of shape (16,), labels 0..121, 16 per sample") &&
                               Catch::Matchers::Contains("data.test: tfrecord, 8 samples"));

  const std::string summary = dir.file("tokens.summary.json");
  const RunOutput run = run_dtrain({"run", "--config", config, "--threads", "1", "--summary", summary}, {120.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Matchers::Contains(" tokens/s - loss: ") &&
                          Catch::Matchers::Contains(" - perplexity: ") &&
                          Catch::Matchers::Contains(" - val_perplexity: "));
  const json a = read_json_file(summary);
  CHECK(a["steps"] == 2 * 5);  // 36 windows in batches of 8
  CHECK(a["tokens_per_sample"] == 16);
  CHECK(a["train_perplexity"].get<double>() == Approx(std::exp(a["train_loss"].get<double>())));
  CHECK(a["train_tokens_per_sec"].get<double>() == Approx(16 * a["train_samples_per_sec"].get<double>()));
  CHECK(a["test_loss"].get<double>() < std::log(256.0));

  // The same bytes as a text source: the same windows, batches and parameters.
  const json text_source = {{"format", "text"}, {"files", {dir.write("fortunes.txt", fixture_text())}}};
  const json b = run_summary(dir, tiny_gpt_on(dir, text_source, "text"), "text");
  CHECK(a["params_sha256"] == b["params_sha256"]);
  CHECK(a["test_loss"] == b["test_loss"]);
}

TEST_CASE("token windows from several TFRecord files are dealt out to 2 workers as a text source's are") {
  // Two files (the fixture twice): shard_policy auto deals out the windows (a text
  // source's way), rather than giving each worker its own file.
  TempDir dir;
  json tokens_job = tiny_gpt_on(dir, {{"format", "tfrecord"}, {"files", {kTokens, kTokens}}}, "tokens");
  tokens_job["strategy"] = {{"type", "multi_worker_mirrored"}};
  const std::string text = fixture_text();
  json text_job = tiny_gpt_on(dir, {{"format", "text"}, {"files", {dir.write("twice.txt", text + text)}}}, "text");
  text_job["strategy"] = tokens_job["strategy"];
  TempDir tokens_dir, text_dir;
  const std::string a = common_params_hash(launch_job(tokens_dir, tokens_job, 2));
  const std::string b = common_params_hash(launch_job(text_dir, text_job, 2));
  CHECK(a == b);
}

TEST_CASE("a token id outside the model's vocabulary is exit 2 naming the TFRecord file and record") {
  TempDir dir;
  json job = tiny_gpt_on(dir, {{"format", "tfrecord"}, {"files", {kTokens}}}, "small");
  job["model"]["layers"][0]["vocabulary_size"] = 100;  // the fortunes' bytes go up to 'y' (121)
  const RunOutput run = run_dtrain({"run", "--config", write_job(dir, job), "--threads", "1"});
  check_error(run, 2, {"data.train: token id 121 ", "(data.train.files[0]: '" + kTokens + "' record ",
                       "of 'input_ids') is outside the model's vocabulary of 100 (model.layers[0].vocabulary_size",
                       "make model.layers[0].vocabulary_size at least 122"});
}
