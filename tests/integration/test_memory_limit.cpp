// runtime.memory_limit through the real dtrain binary: a wide MLP (784 -> 3 x
// Dense(4096) -> Dense(10), Adam, batch 64: about 571 MiB by the estimate) under a
// 200 MiB limit is exit 2 before training, naming the figures, the biggest layer
// and the fixes, both in `run` and in `validate`; without the limit the same job
// prints its estimate, trains a step and records the figures in its summary.
#include <catch2/catch.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

constexpr int kConfigError = 2;

// The wide MLP on synthetic samples; one step of one epoch.
nlohmann::json wide_mlp_job() {
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < 3; ++i) layers.push_back({{"type", "Dense"}, {"units", 4096}, {"activation", "relu"}});
  layers.push_back({{"type", "Dense"}, {"units", 10}});
  return {{"model", {{"input_shape", {784}}, {"layers", layers}}},
          {"loss", {{"type", "sparse_categorical_crossentropy"}, {"from_logits", true}}},
          {"optimizer", "adam"},
          {"data", {{"train", {{"format", "synthetic"}, {"shape", {784}}, {"classes", 10}, {"count", 128}}}}},
          {"train", {{"epochs", 1}, {"steps_per_epoch", 1}, {"batch_size_per_replica", 64}}},
          {"device", "cpu"}};
}

// The figures of the wide MLP, as the estimate counts them (strategy/planning/memory_estimate.cpp).
constexpr int64_t kParamBytes = (784LL * 4096 + 4096 + 2 * (4096LL * 4096 + 4096) + 4096 * 10 + 10) * 4;
constexpr int64_t kActivations = (64LL * 784 + 3 * 64 * 4096 + 64 * 10) * 4;
// The gradients before the three relus, the input gradients of the three layers
// above the first, the loss's gradient of the output.
constexpr int64_t kBackward = (6LL * 64 * 4096 + 64 * 10) * 4;

}  // namespace

TEST_CASE("a job over runtime.memory_limit is exit 2 before training and names the biggest layer", "[integration][memory]") {
  TempDir tmp;
  nlohmann::json job = wide_mlp_job();
  job["runtime"] = {{"memory_limit", "200MiB"}};
  const std::string config = write_job(tmp, job);
  for (const char* command : {"run", "validate"}) {
    INFO(command);
    std::vector<std::string> args = {command, "--config", config};
    if (std::string(command) == "run") args.insert(args.end(), {"--threads", "1"});
    const RunOutput r = run_dtrain(args);
    check_error(r, kConfigError,
                {"runtime.memory_limit: this task needs an estimated 571.0 MiB",
                 "parameters 140.5 MiB, gradients 140.5 MiB, optimizer slots 280.9 MiB",
                 "biggest: dense_1 (Dense) 64.0 MiB of parameters", "but the limit is 200.0 MiB",
                 "strategy.type \"pipeline\"", "strategy.shard (\"optimizer_state\""});
    CHECK(r.out.find("Memory per task (estimate): 571.0 MiB (limit 200.0 MiB)") != std::string::npos);
    CHECK(r.out.find("Epoch") == std::string::npos);  // nothing trained
  }
}

TEST_CASE("without a limit the wide MLP prints its estimate and trains and its summary has the figures", "[integration][memory]") {
  TempDir tmp;
  const std::string summary = tmp.file("summary.json");
  const std::string config = write_job(tmp, wide_mlp_job());
  RunSpec spec;
  spec.deadline_seconds = 60.0;
  const RunOutput v = run_dtrain({"validate", "--config", config}, spec);
  INFO(describe(v));
  REQUIRE(v.exit_code == 0);
  CHECK(v.out.find("Memory per task (estimate): 571.0 MiB (no runtime.memory_limit)") != std::string::npos);
  CHECK(v.out.find("biggest layers: dense_1 (Dense) 64.0 MiB of parameters") != std::string::npos);

  const RunOutput r = run_dtrain({"run", "--config", config, "--threads", "2", "--summary", summary}, spec);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("Memory per task (estimate): 571.0 MiB") != std::string::npos);
  const nlohmann::json s = read_json_file(summary);
  INFO(s.dump(2));
  CHECK(s["steps"] == 1);
  REQUIRE(s.contains("memory"));
  const nlohmann::json& m = s["memory"];
  CHECK(m["parameters"] == kParamBytes);
  CHECK(m["gradients"] == kParamBytes);
  CHECK(m["optimizer_slots"] == 2 * kParamBytes);
  CHECK(m["activations"] == kActivations);
  CHECK(m["backward_buffers"] == kBackward);
  CHECK(m["total"] == 4 * kParamBytes + kActivations + kBackward);
  CHECK(m["limit"] == 0);
}

}  // namespace dtrain::integration
