// strategy.shard "gradients" (ZeRO-2) and "parameters" (ZeRO-3) end to end under
// `dtrain launch`: the shipped MLP on 2 and 4 tasks follows one_device step by
// step with each task's 1/N of the optimizer state; a ZeRO-3 checkpoint resumes
// under one_device, tensor_parallel, a pipeline and ZeRO-2 with the identical
// params_sha256, exports whole, and a resumed ZeRO-3 run ends exactly where the
// uninterrupted one does; a deep MLP that runtime.memory_limit refuses under
// one_device and ZeRO-1 (the message naming the modes that fit) trains under
// ZeRO-3 and tensor parallelism, ZeRO-3's measured peak well below the
// unsharded run's.
#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

// The shipped MLP (Adam) on 4096 samples at a global batch of 128 over `tasks`
// tasks, 10 steps an epoch, a loss record every step, a checkpoint every epoch.
json sharded_job(const TempDir& dir, const std::string& shard, int tasks, int epochs = 1) {
  json job = stepwise_mlp_job(dir, 128 / tasks, epochs);
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"shard", shard}};
  return job;
}

// Adam's m and v of the MLP: 784 x 256 + 256, 256 x 128 + 128, 128 x 10 + 10 floats each.
constexpr int64_t kOptimizerBytes = 2 * 4 * (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);

}  // namespace

TEST_CASE("ZeRO-2 and ZeRO-3 on 2 and 4 tasks follow one_device and hold 1/N of the optimizer state",
          "[integration]") {
  TempDir whole;
  json one = stepwise_mlp_job(whole, 128, 1);
  one["strategy"] = {{"type", "one_device"}};
  launch_job(whole, one, 1);
  const std::vector<double> want = step_losses(whole, 10);
  for (const std::string shard : {"gradients", "parameters"})
    for (const int tasks : {2, 4}) {
      INFO("shard " << shard << " on " << tasks << " tasks");
      TempDir dir;
      const json s = launch_job(dir, sharded_job(dir, shard, tasks), tasks);
      require_close(step_losses(dir, 10), want, 1e-4, "ZeRO vs one_device");
      int64_t total = 0;
      for (const auto& [task, summary] : s["tasks"].items()) {
        INFO(task);
        const int64_t bytes = summary["optimizer_state_bytes"].get<int64_t>();
        CHECK(bytes <= kOptimizerBytes / tasks + 2 * 4 * 3 * 64);  // a chunk per layer, rounded up
        total += bytes;
        CHECK(summary["memory"]["measured"]["peak"].get<int64_t>() > 0);
      }
      CHECK(total == kOptimizerBytes);
    }
}

TEST_CASE("a ZeRO-3 checkpoint resumes under every other layout with the same parameters, exports whole, and a "
          "resumed run ends where the uninterrupted one does",
          "[integration]") {
  TempDir first;
  const std::string saved = common_params_hash(launch_job(first, sharded_job(first, "parameters", 4), 4));
  const std::vector<std::pair<json, int>> layouts = {
      {{{"type", "one_device"}}, 1},
      {{{"type", "multi_worker_mirrored"}, {"tensor_parallel", 2}}, 2},
      {{{"type", "pipeline"}, {"stages", {"dense_1"}}}, 2},
      {{{"type", "multi_worker_mirrored"}, {"shard", "gradients"}}, 3},
      {{{"type", "multi_worker_mirrored"}, {"shard", "parameters"}}, 3}};
  for (const auto& [strategy, tasks] : layouts) {
    INFO("resumed under " << strategy.dump() << " on " << tasks << " tasks");
    TempDir again;
    std::filesystem::copy(first.file("ckpt"), again.file("ckpt"), std::filesystem::copy_options::recursive);
    json resume = stepwise_mlp_job(again, 128, 1);  // its one epoch is done: the report is of the checkpoint's
    resume["strategy"] = strategy;
    const bool copies = strategy["type"] == "multi_worker_mirrored" && !strategy.contains("tensor_parallel");
    resume["train"]["batch_size_per_replica"] = copies ? 128 / tasks : 128;
    resume["checkpoint"]["resume"] = "auto";
    CHECK(common_params_hash(launch_job(again, resume, tasks)) == saved);
  }
  const std::string exported = first.file("model.safetensors");
  const RunOutput e = run_dtrain({"ckpt", "export", first.file("ckpt"), "--to", exported}, {60.0, ""});
  INFO(describe(e));
  CHECK(e.exit_code == 0);
  CHECK(std::filesystem::file_size(exported) > 4u * (784 * 256 + 256 * 128 + 128 * 10));

  // 2 epochs straight, against 1 then resumed for the second (the slots' chunks too).
  TempDir straight, resumed;
  const std::string end = common_params_hash(launch_job(straight, sharded_job(straight, "parameters", 4, 2), 4));
  std::filesystem::copy(first.file("ckpt"), resumed.file("ckpt"), std::filesystem::copy_options::recursive);
  json job = sharded_job(resumed, "parameters", 4, 2);
  job["checkpoint"]["resume"] = "auto";
  CHECK(common_params_hash(launch_job(resumed, job, 4)) == end);
}

namespace {

// 12 Dense layers of 1024 x 1024 (48 MiB of parameters; with Adam 192 MiB a
// task unsharded) on synthetic data, 4 steps.
json deep_job(const TempDir& dir, const json& strategy, int tasks, const std::string& limit) {
  json layers = json::array();
  for (int i = 0; i < 12; ++i) layers.push_back({{"type", "Dense"}, {"units", 1024}, {"activation", "relu"}});
  layers.push_back({{"type", "Dense"}, {"units", 10}});
  json job = {{"model", {{"input_shape", {1024}}, {"layers", layers}}},
              {"loss", {{"type", "sparse_categorical_crossentropy"}, {"from_logits", true}}},
              {"optimizer", {{"type", "adam"}, {"learning_rate", 0.001}}},
              {"data", {{"train", {{"format", "synthetic"}, {"shape", {1024}}, {"count", 1024}, {"classes", 10}}}}},
              {"train", {{"batch_size_per_replica", 32 / tasks}, {"steps_per_epoch", 4}, {"epochs", 1}}},
              {"strategy", strategy},
              {"output", {{"dir", dir.file("out")}}}};
  if (!limit.empty()) job["runtime"] = {{"memory_limit", limit}};
  return job;
}

int64_t measured_training_bytes(const json& launch_summary) {
  int64_t most = 0;
  for (const auto& [task, summary] : launch_summary["tasks"].items())
    most = std::max(most, summary["memory"]["measured"]["training"].get<int64_t>());
  return most;
}

}  // namespace

TEST_CASE("a model runtime.memory_limit refuses under one_device and ZeRO-1 trains under ZeRO-3 and tensor "
          "parallelism, and ZeRO-3's measured peak is a fraction of the unsharded one's",
          "[integration][memory]") {
  const std::string limit = "120MiB";
  TempDir one;
  const RunOutput refused = run_dtrain({"validate", "--config", write_job(one, deep_job(one, {{"type", "one_device"}}, 1, limit))});
  check_error(refused, 2, {"runtime.memory_limit", "strategy.shard (\"optimizer_state\""});
  TempDir zero1;
  const json zero1_job = deep_job(zero1, {{"type", "multi_worker_mirrored"}, {"shard", "optimizer_state"}}, 4, limit);
  const RunOutput refused4 = run_dtrain({"launch", "--workers", "4", "--config", write_job(zero1, zero1_job)},
                                        {120.0, ""});
  INFO(describe(refused4));
  CHECK(refused4.exit_code == 2);
  CHECK_THAT(refused4.err, Catch::Contains("dtrain: error:") && Catch::Contains("runtime.memory_limit") &&
                               Catch::Contains("with 4 training tasks, these fit: "
                                               "strategy.shard \"parameters\"") &&
                               Catch::Contains("strategy.tensor_parallel 4") &&
                               Catch::Contains("strategy.type \"pipeline\" with 4 stages (") &&
                               Catch::Contains("strategy.type \"pipeline\" with 2 stages x tensor_parallel 2 ("));

  TempDir zero3, tensor, plain;
  const json z = launch_job(zero3, deep_job(zero3, {{"type", "multi_worker_mirrored"}, {"shard", "parameters"}}, 4, limit), 4);
  launch_job(tensor, deep_job(tensor, {{"type", "multi_worker_mirrored"}, {"tensor_parallel", 4}}, 4, limit), 4);
  const json p = launch_job(plain, deep_job(plain, {{"type", "multi_worker_mirrored"}}, 4, ""), 4);
  const int64_t sharded = measured_training_bytes(z), unsharded = measured_training_bytes(p);
  INFO("ZeRO-3 " << sharded << " bytes, unsharded " << unsharded << " bytes at the training's peak");
  CHECK(unsharded > 190'000'000);       // its 192 MiB of state is resident
  CHECK(sharded < unsharded * 6 / 10);  // a quarter of it, and the layers in flight
}
