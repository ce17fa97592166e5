// The final checkpoint: a job that saves periodically (checkpoint.every_steps or
// every_epochs) also saves its last step, when training ends by count or by early
// stopping, under every strategy that saves; `dtrain ckpt inspect` and `ckpt
// export` find it from the job's output.dir; `--resume` from it trains nothing and
// reports the same parameters.
#include <catch2/catch.hpp>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;
using Catch::Matchers::Contains;

namespace {

// The MLP on 960 samples at a global batch of 64: 15 steps per epoch, 2 epochs,
// 30 steps, a checkpoint every 7 (the last at step 28), output in dir/out.
json final_job(const TempDir& dir) {
  json job = small_mlp_job(960, 200);
  job["train"]["batch_size_per_replica"] = 64;
  job["train"]["epochs"] = 2;
  job["output"] = {{"dir", dir.file("out")}};
  job["checkpoint"] = {{"every_steps", 7}};
  return job;
}

// `dtrain ckpt inspect --json DIR`: the newest good checkpoint's manifest.
json inspect(const std::string& dir) {
  const RunOutput r = run_dtrain({"ckpt", "inspect", "--json", dir});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  return json::parse(r.out);
}

// Runs `job` with `dtrain run` (tasks == 0) or as `tasks` local tasks (`launch`,
// with `launch_flags`); returns the chief's (or the one task's) run summary.
json train(const TempDir& dir, const json& job, int tasks, const std::vector<std::string>& launch_flags = {}) {
  std::vector<std::string> args = {tasks > 0 ? "launch" : "run"};
  if (tasks > 0) args.insert(args.end(), {"--workers", std::to_string(tasks)});
  args.insert(args.end(), launch_flags.begin(), launch_flags.end());
  const std::string summary = dir.file("summary.json");
  args.insert(args.end(), {"--config", write_job(dir, job), "--threads", "1", "--summary", summary});
  const RunOutput r = run_dtrain(args, {180.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const json s = read_json_file(summary);
  if (tasks == 0) return s;
  return s["tasks"].contains("chief:0") ? s["tasks"]["chief:0"] : s["tasks"]["worker:0"];
}

}  // namespace

TEST_CASE("a run of 30 steps saving every 7 ends with a checkpoint of step 30, which ckpt and --resume find",
          "[integration]") {
  TempDir dir;
  const json first = train(dir, final_job(dir), 0);
  REQUIRE(first["steps"] == 30);
  CHECK(std::filesystem::exists(dir.file("out/checkpoints/ckpt-00000028/DONE")));  // the periodic ones go on
  CHECK(std::filesystem::exists(dir.file("out/checkpoints/ckpt-00000030/DONE")));

  // ckpt inspect and export, given the job's output.dir.
  const RunOutput shown = run_dtrain({"ckpt", "inspect", dir.file("out")});
  INFO(describe(shown));
  REQUIRE(shown.exit_code == 0);
  CHECK_THAT(shown.err, Contains("reading " + dir.file("out") + "/checkpoints"));
  CHECK_THAT(shown.out, Contains("latest good: ckpt-00000030") && Contains("step            30") &&
                            Contains("epoch           2"));
  const RunOutput exported = run_dtrain({"ckpt", "export", dir.file("out"), "--to", dir.file("final.safetensors")});
  INFO(describe(exported));
  REQUIRE(exported.exit_code == 0);
  CHECK_THAT(exported.out, Contains("ckpt-00000030 (step 30)"));

  // --resume of the finished run: nothing to train, nothing saved, the same parameters.
  const RunOutput resumed = run_dtrain({"run", "--config", dir.file("job.json"), "--threads", "1", "--resume",
                                        "--summary", dir.file("resumed.json")},
                                       {120.0, ""});
  INFO(describe(resumed));
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.err, Contains("resumed from " + dir.file("out/checkpoints/ckpt-00000030")) &&
                              Contains("is the end of training (2 epoch(s) done, train.epochs is 2): nothing is "
                                       "left to train"));
  CHECK_THAT(resumed.err, !Contains("checkpoint: saved"));
  const json again = read_json_file(dir.file("resumed.json"));
  CHECK(again["steps"] == 30);
  CHECK(again["params_sha256"] == first["params_sha256"]);
}

TEST_CASE("a run that every_epochs saves ends with the last epoch's checkpoint, also when it is not due",
          "[integration]") {
  TempDir dir;
  json job = final_job(dir);
  job["train"]["epochs"] = 3;
  job["checkpoint"] = {{"every_epochs", 2}};
  REQUIRE(train(dir, job, 0)["steps"] == 45);
  CHECK(std::filesystem::exists(dir.file("out/checkpoints/ckpt-00000030/DONE")));  // epoch 2's
  CHECK(inspect(dir.file("out/checkpoints"))["step"] == 45);
}

TEST_CASE("early stopping ends training with a checkpoint of its last step", "[integration]") {
  TempDir dir;
  json job = final_job(dir);
  job["train"]["epochs"] = 5;
  // No epoch after the first improves the loss by 100: Keras' EarlyStopping stops after the second.
  job["train"]["early_stopping"] = {{"monitor", "loss"}, {"min_delta", 100}, {"patience", 0}};
  const json s = train(dir, job, 0);
  REQUIRE(s["stopped_epoch"] == 2);
  REQUIRE(s["steps"] == 30);
  const json newest = inspect(dir.file("out/checkpoints"));
  CHECK(newest["step"] == 30);
  CHECK(newest["epoch"] == 2);
}

TEST_CASE("every strategy that saves checkpoints saves the final step", "[integration]") {
  struct Case {
    const char* name;
    json strategy;
    int batch;  // per replica: a global batch of 64 (parameter_server: each update is one worker's 16)
    int tasks;  // 0: dtrain run
    std::vector<std::string> launch_flags;
  };
  const std::vector<Case> cases = {
      {"mirrored", {{"type", "mirrored"}, {"replicas", 2}}, 32, 0, {}},
      {"central_storage", {{"type", "central_storage"}, {"replicas", 2}}, 32, 0, {}},
      {"multi_worker_mirrored", {{"type", "multi_worker_mirrored"}}, 32, 2, {}},
      {"ZeRO-1", {{"type", "multi_worker_mirrored"}, {"shard_optimizer_state", true}}, 32, 2, {}},
      {"pipeline", {{"type", "pipeline"}, {"stages", {"dense_1"}}}, 64, 2, {}},
      {"parameter_server", {{"type", "parameter_server"}}, 16, 2, {"--ps", "1", "--chief"}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    TempDir dir;
    json job = final_job(dir);
    job["strategy"] = c.strategy;
    job["train"]["batch_size_per_replica"] = c.batch;
    // Saves after epoch 2 only; the 3rd is the final one. (Not every_steps: a
    // parameter_server coordinator saves at the step it sees when it passes a
    // multiple, which may be the last step anyway.)
    job["train"]["epochs"] = 3;
    job["checkpoint"] = {{"every_epochs", 2}};
    const json s = train(dir, job, c.tasks, c.launch_flags);
    const json newest = inspect(dir.file("out/checkpoints"));
    CHECK(newest["epoch"] == 3);
    CHECK(newest["step"] == s["steps"]);
  }
}
