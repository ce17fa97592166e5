// Keras' epoch callbacks end to end on the MLP (2000 Fashion-MNIST samples):
//  - train.early_stopping with a min_delta no epoch can reach and patience 1 stops
//    after epoch 2 of 5, and restore_best_weights ends with epoch 1's parameters
//    and test figures, exactly those of a 1-epoch run of the same seed; under
//    `dtrain launch --workers 2` both workers stop after the same epoch;
//  - checkpoint.save_best_only writes only the epochs that improved the monitored
//    figure, and records the best in the checkpoint;
//  - what they need is checked before training (exit 2).
#include <catch2/catch.hpp>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Runs `job` with --summary; REQUIREs exit 0; the summary.
json run_job(const TempDir& dir, const json& job, const std::string& tag) {
  const std::string summary = dir.file(tag + "_summary.json");
  const RunOutput r = run_dtrain({"run", "--config", write_job(dir, job, tag + ".json"), "--summary", summary,
                                  "--threads", "1"},
                                 {120.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  return read_json_file(summary);
}

json never_improving_stop(bool restore) {
  // Only the first epoch counts as an improvement: later ones would have to beat
  // it by 100.
  return {{"monitor", "val_loss"}, {"min_delta", 100}, {"patience", 1}, {"restore_best_weights", restore}};
}

std::vector<std::string> checkpoints_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("ckpt-", 0) == 0) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("early stopping stops after patience epochs and restores the best epoch's parameters") {
  TempDir dir;
  json one_epoch = small_mlp_job();
  one_epoch["train"]["epochs"] = 1;
  const json reference = run_job(dir, one_epoch, "one_epoch");

  json job = small_mlp_job();
  job["train"]["epochs"] = 5;
  job["train"]["early_stopping"] = never_improving_stop(true);
  job["output"] = {{"dir", dir.file("out")}};
  const json stopped = run_job(dir, job, "stopped");
  CHECK(stopped["epochs"] == 2);
  CHECK(stopped["stopped_epoch"] == 2);
  CHECK(stopped["restored_epoch"] == 1);
  CHECK(stopped["steps"] == 2 * reference["steps"].get<int>());
  CHECK(stopped["params_sha256"] == reference["params_sha256"]);
  CHECK(stopped["test_accuracy"] == reference["test_accuracy"]);
  int epoch_records = 0;
  for (const json& rec : read_json_lines(dir.file("out/metrics.jsonl"))) epoch_records += rec["kind"] == "epoch";
  CHECK(epoch_records == 2);

  // Without restore_best_weights it ends with epoch 2's parameters.
  job["train"]["early_stopping"] = never_improving_stop(false);
  job["output"] = {{"dir", dir.file("out2")}};
  const json last = run_job(dir, job, "last");
  CHECK(last["epochs"] == 2);
  CHECK_FALSE(last.contains("restored_epoch"));
  CHECK(last["params_sha256"] != reference["params_sha256"]);
}

TEST_CASE("two workers under launch stop after the same epoch with the same parameters") {
  TempDir dir;
  json job = small_mlp_job();
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  job["train"]["batch_size_per_replica"] = 16;
  job["train"]["epochs"] = 4;
  job["train"]["early_stopping"] = never_improving_stop(true);
  const std::string summary = dir.file("launch.json");
  const RunOutput r = run_dtrain({"launch", "--workers", "2", "--threads", "1", "--config", write_job(dir, job),
                                  "--summary", summary},
                                 {180.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const json s = read_json_file(summary);
  for (const char* task : {"worker:0", "worker:1"}) {
    CHECK(s["tasks"][task]["epochs"] == 2);
    CHECK(s["tasks"][task]["restored_epoch"] == 1);
  }
  CHECK(s["tasks"]["worker:0"]["params_sha256"] == s["tasks"]["worker:1"]["params_sha256"]);
  CHECK_THAT(r.out + r.err, Catch::Contains("early stopping"));
}

TEST_CASE("under ZeRO-3, tensor_parallel and pipeline x tensor, restore_best_weights ends on the best epoch's "
          "parameters") {
  // ZeRO-3 gathers the whole model for its copy; a tensor part's copy is of its part.
  const std::vector<std::pair<json, int>> layouts = {
      {{{"type", "multi_worker_mirrored"}, {"shard", "parameters"}}, 2},
      {{{"type", "multi_worker_mirrored"}, {"tensor_parallel", 2}}, 2},
      {{{"type", "pipeline"}, {"stages", {"dense_2"}}, {"tensor_parallel", 2}}, 4}};
  for (const auto& [strategy, tasks] : layouts) {
    INFO(strategy.dump());
    TempDir dir;
    json job = small_mlp_job();
    job["strategy"] = strategy;
    job["train"]["batch_size_per_replica"] = 16;
    job["train"]["epochs"] = 1;
    const std::string reference = common_params_hash(launch_job(dir, job, tasks));  // epoch 1's parameters
    job["train"]["epochs"] = 4;
    job["train"]["early_stopping"] = never_improving_stop(true);
    const json s = launch_job(dir, job, tasks);
    for (const auto& [task, summary] : s["tasks"].items()) {
      INFO(task);
      CHECK(summary["epochs"] == 2);
      CHECK(summary["restored_epoch"] == 1);
    }
    CHECK(common_params_hash(s) == reference);
  }
}

TEST_CASE("save_best_only saves only the epochs whose monitored figure improved") {
  TempDir dir;
  json job = small_mlp_job();
  job["train"]["epochs"] = 3;
  // The training loss falls every epoch: in max mode only epoch 1 is a best.
  job["checkpoint"] = {{"dir", dir.file("max")}, {"save_best_only", true}, {"monitor", "loss"}, {"mode", "max"}};
  const json max_mode = run_job(dir, job, "max");
  const int steps_per_epoch = max_mode["steps"].get<int>() / 3;
  const auto saved = checkpoints_in(dir.file("max"));
  REQUIRE(saved.size() == 1);
  const json manifest = read_json_file(dir.file("max/" + saved[0] + "/manifest.json"));
  CHECK(manifest["step"] == steps_per_epoch);
  const json best = manifest["rng"]["callbacks"]["save_best_only"];
  INFO(manifest.dump(2));
  CHECK(best["monitor"] == "loss");
  CHECK(best["best"].is_number());

  // In the auto (min) mode every epoch improves: three checkpoints.
  job["checkpoint"] = {{"dir", dir.file("min")}, {"save_best_only", true}, {"monitor", "loss"}};
  run_job(dir, job, "min");
  CHECK(checkpoints_in(dir.file("min")).size() == 3);
}

TEST_CASE("the Keras callbacks' requirements are config errors") {
  TempDir dir;
  json job = small_mlp_job();
  job["data"]["test"] = nullptr;
  job["train"]["early_stopping"] = {{"monitor", "val_loss"}};
  check_error(run_dtrain({"run", "--config", write_job(dir, job, "no_test.json")}), 2,
              {"train.early_stopping.monitor: 'val_loss' is measured on data.test", "monitor 'loss'"});

  job = small_mlp_job();
  job["checkpoint"] = {{"dir", dir.file("c")}, {"save_best_only", true}, {"every_steps", 10}};
  check_error(run_dtrain({"run", "--config", write_job(dir, job, "steps.json")}), 2,
              {"checkpoint.every_steps", "save_best_only compares the epochs' figures"});

  job = small_mlp_job();
  job["train"]["early_stopping"] = {{"monitor", "val_acc"}};
  check_error(run_dtrain({"run", "--config", write_job(dir, job, "acc.json")}), 2,
              {"train.early_stopping.monitor", "unknown monitor 'val_acc'", "val_accuracy"});
}
