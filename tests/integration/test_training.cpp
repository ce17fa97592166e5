// Short real trainings through the dtrain binary: the MLP on 2000 Fashion-MNIST
// samples for one epoch writes a complete --summary and a metrics.jsonl that agree;
// the same seed gives bit-identical parameters (one thread, and two threads), a
// different seed does not; --set really changes the run; the CNN runs end to end;
// `bench train --json` prints one JSON object; a synthetic-data job trains, also
// with rmsprop, global_clipnorm and a piecewise_constant schedule. Every
// run is small (seconds), so the whole file stays well under a minute on 2 cores.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

constexpr int64_t kTrainTake = 2000;
constexpr int64_t kTestTake = 500;

struct Trained {
  RunOutput run;
  nlohmann::json summary;
  std::string output_dir;
};

// Runs `job` (written into `tmp`) with --summary and output.dir inside `tmp`, plus
// `extra` arguments; REQUIREs exit 0 and returns the parsed summary.
Trained train(const TempDir& tmp, const nlohmann::json& job, const std::vector<std::string>& extra,
              const std::string& tag = "run", double deadline_seconds = 60.0) {
  Trained t;
  t.output_dir = tmp.file(tag + "_out");
  const std::string summary = tmp.file(tag + "_summary.json");
  std::vector<std::string> args = {"run",       "--config", write_job(tmp, job, tag + "_job.json"),
                                   "--summary", summary,    "--set",
                                   "output.dir=" + t.output_dir};
  args.insert(args.end(), extra.begin(), extra.end());
  RunSpec spec;
  spec.deadline_seconds = deadline_seconds;
  t.run = run_dtrain(args, spec);
  INFO(describe(t.run));
  REQUIRE(t.run.exit_code == 0);
  t.summary = read_json_file(summary);
  return t;
}

bool is_sha256_hex(const nlohmann::json& value) {
  if (!value.is_string()) return false;
  const std::string s = value.get<std::string>();
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A job on 512 synthetic samples of 4 classes, batch 32, Adam at 0.01.
nlohmann::json synthetic_job(const std::vector<int64_t>& shape, const nlohmann::json& layers, int epochs) {
  return {{"model", {{"input_shape", shape}, {"layers", layers}}},
          {"loss", {{"type", "sparse_categorical_crossentropy"}, {"from_logits", true}}},
          {"optimizer", {{"type", "adam"}, {"learning_rate", 0.01}}},
          {"data",
           {{"train", {{"format", "synthetic"}, {"shape", shape}, {"classes", 4}, {"count", 512}, {"seed", 3}}}}},
          {"train", {{"epochs", epochs}, {"batch_size_per_replica", 32}, {"seed", 1}}}};
}

}  // namespace

TEST_CASE("a short MLP run writes a complete summary and metrics.jsonl", "[integration]") {
  TempDir tmp;
  const nlohmann::json job = small_mlp_job(kTrainTake, kTestTake);
  const int64_t batch = job["train"]["batch_size_per_replica"].get<int64_t>();
  const Trained t = train(tmp, job, {"--threads", "1"});
  const nlohmann::json& s = t.summary;
  INFO("summary: " << s.dump(2));

  for (const char* key : {"test_accuracy", "test_loss", "epochs", "steps", "global_batch_size",
                          "train_samples_per_sec", "wall_seconds", "world_size", "params_sha256"}) {
    INFO("key: " << key);
    REQUIRE(s.contains(key));
    if (std::string(key) != "params_sha256") CHECK(s[key].is_number());
  }
  CHECK(is_sha256_hex(s["params_sha256"]));
  CHECK(s["epochs"] == 1);
  CHECK(s["steps"] == ceil_div(kTrainTake, batch));
  CHECK(s["world_size"] == 1);
  CHECK(s["global_batch_size"] == batch);
  CHECK(s["train_samples_per_sec"].get<double>() > 0.0);
  CHECK(s["wall_seconds"].get<double>() > 0.0);
  CHECK(s["test_loss"].get<double>() > 0.0);
  const double accuracy = s["test_accuracy"].get<double>();
  CHECK(accuracy > 0.5);  // chance is 0.1
  CHECK(accuracy <= 1.0);

  // stdout tells the same story.
  CHECK_THAT(t.run.out, Catch::Matchers::Contains("Epoch 1/1"));
  CHECK_THAT(t.run.out, Catch::Matchers::Contains(s["params_sha256"].get<std::string>()));

  const std::string metrics_path = t.output_dir + "/metrics.jsonl";
  REQUIRE(std::filesystem::exists(metrics_path));
  const std::vector<nlohmann::json> records = read_json_lines(metrics_path);
  REQUIRE_FALSE(records.empty());
  std::vector<nlohmann::json> epochs;
  for (const nlohmann::json& record : records) {
    REQUIRE(record.is_object());
    if (record.value("kind", "") == "epoch") epochs.push_back(record);
  }
  REQUIRE(epochs.size() == 1);
  CHECK(epochs[0]["epoch"] == 1);
  CHECK(epochs[0]["step"] == s["steps"]);
  REQUIRE(epochs[0].contains("val_accuracy"));
  CHECK(epochs[0]["val_accuracy"].get<double>() == accuracy);
}

TEST_CASE("the same seed gives the same parameters and another seed does not", "[integration]") {
  TempDir tmp;
  const nlohmann::json job = small_mlp_job(kTrainTake, kTestTake);
  auto hash_of = [&](const std::string& tag, const std::vector<std::string>& extra) {
    return train(tmp, job, extra, tag).summary["params_sha256"].get<std::string>();
  };
  const std::string one_a = hash_of("t1a", {"--threads", "1"});
  const std::string one_b = hash_of("t1b", {"--threads", "1"});
  CHECK(one_a == one_b);
  const std::string two_a = hash_of("t2a", {"--threads", "2"});
  const std::string two_b = hash_of("t2b", {"--threads", "2"});
  CHECK(two_a == two_b);
  const std::string other_seed = hash_of("seed", {"--threads", "1", "--set", "train.seed=2"});
  CHECK(other_seed != one_a);
}

TEST_CASE("overriding train.epochs=2 with --set gives two epochs and twice the steps", "[integration]") {
  TempDir tmp;
  const nlohmann::json job = small_mlp_job(kTrainTake, kTestTake);
  const int64_t batch = job["train"]["batch_size_per_replica"].get<int64_t>();
  const Trained t = train(tmp, job, {"--threads", "2", "--set", "train.epochs=2"});
  INFO("summary: " << t.summary.dump(2));
  CHECK(t.summary["epochs"] == 2);
  CHECK(t.summary["steps"] == 2 * ceil_div(kTrainTake, batch));
  int64_t epoch_records = 0;
  for (const nlohmann::json& record : read_json_lines(t.output_dir + "/metrics.jsonl"))
    epoch_records += record.value("kind", "") == "epoch";
  CHECK(epoch_records == 2);
  CHECK_THAT(t.run.out, Catch::Matchers::Contains("Epoch 2/2"));
}

TEST_CASE("the CNN config runs a few steps end to end", "[integration]") {
  TempDir tmp;
  const nlohmann::json job = shipped_config("fashion_mnist_cnn.json");
  const Trained t = train(tmp, job,
                          {"--threads", "2", "--set", "train.steps_per_epoch=5", "--set", "train.epochs=1",
                           "--set", "data.train.take=640", "--set", "data.test.take=200"},
                          "cnn", 120.0);
  INFO("summary: " << t.summary.dump(2));
  CHECK(t.summary["steps"] == 5);
  CHECK(is_sha256_hex(t.summary["params_sha256"]));
  CHECK(t.summary["test_accuracy"].is_number());
}

TEST_CASE("mixed_bfloat16 trains the CNN to about float32's accuracy", "[integration][bf16]") {
  TempDir tmp;
  const nlohmann::json job = small_cnn_job(2000, 500);
  const std::vector<std::string> args = {"--threads", "2", "--set", "train.epochs=2"};
  const Trained f32 = train(tmp, job, args, "f32", 120.0);
  std::vector<std::string> bf16_args = args;
  bf16_args.insert(bf16_args.end(), {"--set", "train.precision=mixed_bfloat16"});
  const Trained bf16 = train(tmp, job, bf16_args, "bf16", 120.0);
  const double a32 = f32.summary["test_accuracy"].get<double>(), a16 = bf16.summary["test_accuracy"].get<double>();
  WARN("2 epochs on 2000 samples: test accuracy float32 " << a32 << ", mixed_bfloat16 " << a16);
  CHECK(a16 > 0.6);
  CHECK(std::fabs(a16 - a32) < 0.05);
  CHECK(bf16.summary["params_sha256"] != f32.summary["params_sha256"]);  // it did compute in bfloat16
  CHECK(bf16.summary["precision"] == "mixed_bfloat16");
  CHECK(f32.summary["precision"] == "float32");
}

TEST_CASE("bench train --json prints one JSON object with samples_per_sec > 0", "[integration]") {
  TempDir tmp;
  const RunOutput r = run_dtrain({"bench", "train", "--config", write_job(tmp, small_mlp_job()), "--json",
                                  "--steps", "5", "--warmup", "1", "--threads", "1"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  std::string out = r.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  CHECK(out.find('\n') == std::string::npos);  // one line
  nlohmann::json j;
  REQUIRE_NOTHROW(j = nlohmann::json::parse(out));
  REQUIRE(j.is_object());
  REQUIRE(j.contains("samples_per_sec"));
  CHECK(j["samples_per_sec"].get<double>() > 0.0);
  CHECK(j["steps"] == 5);
}

TEST_CASE("a synthetic-data job trains", "[integration]") {
  TempDir tmp;
  const nlohmann::json job = synthetic_job({8, 8, 1},
                                           {{{"type", "Flatten"}},
                                            {{"type", "Dense"}, {"units", 32}, {"activation", "relu"}},
                                            {{"type", "Dense"}, {"units", 4}}},
                                           3);
  const Trained t = train(tmp, job, {"--threads", "1"}, "synthetic");
  INFO("summary: " << t.summary.dump(2));
  CHECK(t.summary["epochs"] == 3);
  CHECK(t.summary["steps"] == 3 * ceil_div(512, 32));
  CHECK(t.summary["test_accuracy"].is_null());  // no test set
  CHECK(t.summary["train_accuracy"].get<double>() > 0.5);  // 4 well-separated classes; chance is 0.25
}

TEST_CASE("rmsprop with global_clipnorm and a piecewise_constant schedule trains to a finite loss", "[integration]") {
  TempDir tmp;
  nlohmann::json job = synthetic_job({8, 8, 1},
                                     {{{"type", "Flatten"}},
                                      {{"type", "Dense"}, {"units", 32}, {"activation", "relu"}},
                                      {{"type", "Dense"}, {"units", 4}}},
                                     2);
  job["optimizer"] = {{"type", "rmsprop"},
                      {"momentum", 0.5},
                      {"centered", true},
                      {"global_clipnorm", 1.0},
                      {"learning_rate",
                       {{"type", "piecewise_constant"}, {"boundaries", {16}}, {"values", {0.003, 0.001}}}}};
  const Trained t = train(tmp, job, {"--threads", "1"}, "rmsprop");
  INFO("summary: " << t.summary.dump(2));
  CHECK(t.summary["steps"] == 2 * ceil_div(512, 32));
  REQUIRE(t.summary["train_loss"].is_number());
  CHECK(std::isfinite(t.summary["train_loss"].get<double>()));
  CHECK(t.summary["train_accuracy"].get<double>() > 0.5);  // chance is 0.25
}

TEST_CASE("a ResNet-style model trains and resumes from a checkpoint with the uninterrupted run's parameters",
          "[integration]") {
  TempDir tmp;
  const nlohmann::json conv = {{"type", "Conv2D"}, {"filters", 8}, {"kernel_size", 3}, {"padding", "same"}};
  nlohmann::json down_conv = conv;
  down_conv["filters"] = 16;
  down_conv["strides"] = 2;
  nlohmann::json projection = down_conv;
  projection["kernel_size"] = 1;
  const nlohmann::json bn = {{"type", "BatchNormalization"}};
  const nlohmann::json relu = {{"type", "Activation"}, {"activation", "relu"}};
  nlohmann::json conv16 = conv;
  conv16["filters"] = 16;
  nlohmann::json job =
      synthetic_job({8, 8, 3},
                    {conv,
                     {{"type", "Residual"}, {"layers", {conv, bn, relu, conv, bn}}, {"activation", "relu"}},
                     {{"type", "Residual"},
                      {"layers", {down_conv, bn, relu, conv16, bn}},
                      {"shortcut", {projection, bn}},
                      {"activation", "relu"}},
                     {{"type", "GlobalAveragePooling2D"}},
                     {{"type", "Dense"}, {"units", 4}}},
                    2);
  const Trained whole = train(tmp, job, {"--threads", "1"}, "whole");
  INFO("summary: " << whole.summary.dump(2));
  CHECK(whole.summary["train_accuracy"].get<double>() > 0.5);  // chance is 0.25

  // One epoch with a checkpoint at its end, then --resume for the second.
  const std::string ckpt = tmp.file("ckpt");
  job["checkpoint"] = {{"dir", ckpt}, {"every_epochs", 1}};
  job["train"]["epochs"] = 1;
  train(tmp, job, {"--threads", "1"}, "first");
  job["train"]["epochs"] = 2;
  const Trained resumed = train(tmp, job, {"--threads", "1", "--resume"}, "resumed");
  CHECK_THAT(resumed.run.err, Catch::Matchers::Contains("resumed from"));
  // Every param of the blocks (BN moving statistics in the shortcut too) went through the checkpoint.
  CHECK(resumed.summary["params_sha256"] == whole.summary["params_sha256"]);
}

}  // namespace dtrain::integration
