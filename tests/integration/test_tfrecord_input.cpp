// TFRecord input end to end with the real binary:
//  - the files TensorFlow wrote (tests/fixtures/tfrecord) train to the same
//    parameters, bit for bit, as the IDX file they were written from;
//  - Fashion-MNIST written as TFRecord shards here (dtrain's writer and the
//    tf.train.Example message) trains like the IDX run, globbed and gzipped;
//  - with data.cache false the shards stream (read each epoch) to the same parameters;
//  - a flipped byte is exit 3 naming the file and the record;
//  - shard_policy file (and auto, with a file per worker) gives each of 2
//    workers its own files under `dtrain launch`.
#include <catch2/catch.hpp>

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
        {"launch", "--workers", "2", "--threads", "1", "--config", write_job(dir, job, policy + ".json")}, {120.0, ""});
    INFO(describe(run));
    REQUIRE(run.exit_code == 0);
    // Worker k reads files k and k + 2: 100 of the 200 samples each, 10 steps of 10.
    CHECK_THAT(run.out, Catch::Matchers::Contains("[worker:0] Data: 100 training samples") &&
                            Catch::Matchers::Contains("[worker:1] Data: 100 training samples"));
  }
}
