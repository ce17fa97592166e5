// TensorBoard event files end to end: a 2-epoch run's files under
// <output.dir>/tensorboard/{train,validation} hold, under Keras' tags, exactly
// the figures of its metrics.jsonl (a language model's perplexity and tokens/s too) (read back here with dtrain's TFRecord reader
// and the Event message; float32, as tf.summary.scalar stores them), and
// TensorBoard's own reader loads them the same (tests/python/check_tensorboard.py
// in the venv of scripts/tensorboard-venv.sh; without that venv the test says
// DTRAIN-SKIPPED and ctest reports it skipped: the test command never downloads).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "data/tfrecord.h"
#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "proto/tf_summary.pb.h"

using namespace dtrain::integration;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// tag -> step -> value, from every event file in `dir`; checks each file's first record.
std::map<std::string, std::map<int64_t, float>> read_scalars(const std::string& dir) {
  std::map<std::string, std::map<int64_t, float>> scalars;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    INFO(entry.path());
    REQUIRE(name.rfind("events.out.tfevents.", 0) == 0);
    ++files;
    dtrain::data::TfRecordReader reader(entry.path().string(), "test");
    std::string record;
    REQUIRE(reader.next(record));
    dtrain::tf::Event first;
    REQUIRE(first.ParseFromString(record));
    CHECK(first.file_version() == "brain.Event:2");
    while (reader.next(record)) {
      dtrain::tf::Event event;
      REQUIRE(event.ParseFromString(record));
      for (const auto& value : event.summary().value()) {
        CHECK(value.metadata().plugin_data().plugin_name() == "scalars");
        REQUIRE(value.tensor().float_val_size() == 1);
        scalars[value.tag()][event.step()] = value.tensor().float_val(0);
      }
    }
  }
  CHECK(files == 1);
  return scalars;
}

json two_epoch_job(const TempDir& dir) {
  json job = small_mlp_job(1024, 256);
  job["train"]["epochs"] = 2;
  job["train"]["batch_size_per_replica"] = 64;
  job["train"]["log_every_steps"] = 4;
  job["output"] = {{"dir", dir.file("out")}};
  return job;
}

}  // namespace

TEST_CASE("the TensorBoard files hold metrics.jsonl's figures under Keras' tags") {
  TempDir dir;
  const RunOutput run = run_dtrain({"run", "--config", write_job(dir, two_epoch_job(dir)), "--threads", "1"}, {120.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  const auto train = read_scalars(dir.file("out/tensorboard/train"));
  const auto validation = read_scalars(dir.file("out/tensorboard/validation"));
  int step_records = 0, epoch_records = 0;
  for (const json& r : read_json_lines(dir.file("out/metrics.jsonl"))) {
    INFO(r.dump());
    if (r["kind"] == "step") {
      ++step_records;
      const int64_t step = r["step"];
      CHECK(train.at("batch_loss").at(step) == static_cast<float>(r["loss"].get<double>()));
      CHECK(train.at("batch_accuracy").at(step) == static_cast<float>(r["accuracy"].get<double>()));
    } else if (r["kind"] == "epoch") {
      ++epoch_records;
      const int64_t at = r["epoch"].get<int64_t>() - 1;  // Keras' 0-based epoch
      CHECK(train.at("epoch_loss").at(at) == static_cast<float>(r["loss"].get<double>()));
      CHECK(train.at("epoch_accuracy").at(at) == static_cast<float>(r["accuracy"].get<double>()));
      CHECK(train.at("epoch_learning_rate").at(at) == static_cast<float>(r["learning_rate"].get<double>()));
      CHECK(train.at("epoch_samples_per_sec").at(at) == static_cast<float>(r["samples_per_sec"].get<double>()));
      CHECK(train.at("epoch_step_ms").at(at) == static_cast<float>(r["step_ms"].get<double>()));
      CHECK(train.at("epoch_comm_wait_share").at(at) == static_cast<float>(r["comm_wait_share"].get<double>()));
      CHECK(validation.at("epoch_loss").at(at) == static_cast<float>(r["val_loss"].get<double>()));
      CHECK(validation.at("epoch_accuracy").at(at) == static_cast<float>(r["val_accuracy"].get<double>()));
    }
  }
  CHECK(epoch_records == 2);
  CHECK(step_records == 2 * 16 / 4);
  CHECK(train.at("batch_loss").size() == static_cast<size_t>(step_records));
  CHECK(train.at("epoch_loss").size() == 2);
  CHECK(train.at("epoch_learning_rate").at(0) > 0.0f);
}

TEST_CASE("a language model's TensorBoard files add perplexity and tokens/s, as metrics.jsonl does") {
  TempDir dir;
  const RunOutput run =
      run_dtrain({"run", "--config", write_job(dir, language_model_job(dir)), "--threads", "1"}, {120.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  const auto train = read_scalars(dir.file("out/tensorboard/train"));
  const auto validation = read_scalars(dir.file("out/tensorboard/validation"));
  int epoch_records = 0;
  for (const json& r : read_json_lines(dir.file("out/metrics.jsonl"))) {
    INFO(r.dump());
    if (r["kind"] == "step") {
      CHECK(train.at("batch_perplexity").at(r["step"].get<int64_t>()) == static_cast<float>(r["perplexity"].get<double>()));
    } else if (r["kind"] == "epoch") {
      ++epoch_records;
      const int64_t at = r["epoch"].get<int64_t>() - 1;
      CHECK(train.at("epoch_perplexity").at(at) == static_cast<float>(r["perplexity"].get<double>()));
      CHECK(train.at("epoch_tokens_per_sec").at(at) == static_cast<float>(r["tokens_per_sec"].get<double>()));
      CHECK(validation.at("epoch_perplexity").at(at) == static_cast<float>(r["val_perplexity"].get<double>()));
    }
  }
  CHECK(epoch_records == 2);
}

TEST_CASE("output.tensorboard false writes no event files") {
  TempDir dir;
  json job = two_epoch_job(dir);
  job["train"]["epochs"] = 1;
  job["output"]["tensorboard"] = false;
  const RunOutput run = run_dtrain({"run", "--config", write_job(dir, job), "--threads", "1"}, {120.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK(fs::exists(dir.file("out/metrics.jsonl")));
  CHECK_FALSE(fs::exists(dir.file("out/tensorboard")));
}

TEST_CASE("TensorBoard's own reader loads the files with metrics.jsonl's values") {
  const std::string python = std::string(DTRAIN_SOURCE_DIR) + "/build/tensorboard-venv/bin/python";
  if (!fs::exists(python) || run_program(python, {"-c", "import tensorboard"}).exit_code != 0) {
    std::puts("DTRAIN-SKIPPED: TensorBoard's reader needs the venv of scripts/tensorboard-venv.sh "
              "(build/tensorboard-venv, made from PyPI; the tests never download)");
    return;
  }
  TempDir dir;
  const RunOutput run = run_dtrain({"run", "--config", write_job(dir, two_epoch_job(dir)), "--threads", "1"}, {120.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  const RunOutput check =
      run_program(python, {std::string(DTRAIN_SOURCE_DIR) + "/tests/python/check_tensorboard.py", dir.file("out")},
                  {120.0, ""});
  INFO(describe(check));
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.out, Catch::Matchers::Contains("TensorBoard read"));
}
