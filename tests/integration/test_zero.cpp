// ZeRO stage 1 (strategy.shard_optimizer_state) end to end under `dtrain launch`:
// the sharded MLP on 2 workers follows the unsharded one step by step (losses
// within 1e-5 relative) while each task reports about half the optimizer-state
// bytes in its summary; its checkpoints are sharded (one part per task, the
// optimizer slots in pieces) and resume onto 4 workers sharded and onto 1 worker
// unsharded, and an unsharded checkpoint resumes sharded, each following the
// uninterrupted unsharded run.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

// The shipped MLP (Adam) on 4096 samples at a global batch of 128, a loss record every step.
json zero_job(const TempDir& dir, int workers, bool shard, int epochs = 1) {
  json job = stepwise_mlp_job(dir, 128 / workers, epochs);
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"shard_optimizer_state", shard}};
  return job;
}

// Launches the job; returns the launch summary (every task's) after checking
// that every task ends with the same parameters.
json launch(const json& job, int workers, const TempDir& dir, const std::string& name = "job.json") {
  const std::string summary = dir.file(name + ".summary");
  const RunOutput r = run_dtrain({"launch", "--workers", std::to_string(workers), "--config",
                                  write_job(dir, job, name), "--threads", "1", "--summary", summary},
                                 {180.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  if (job["strategy"]["shard_optimizer_state"].get<bool>() && workers > 1)
    CHECK_THAT(r.out, Catch::Contains("(sharded 1/" + std::to_string(workers) + ")"));
  const json s = read_json_file(summary);
  common_params_hash(s);
  return s;
}

std::vector<double> last(const std::vector<double>& v, size_t n) { return {v.end() - static_cast<long>(n), v.end()}; }

}  // namespace

TEST_CASE("ZeRO-1 on 2 workers follows the unsharded run and holds half the optimizer state per task") {
  TempDir plain, sharded;
  const json a = launch(zero_job(plain, 2, false), 2, plain);
  const json b = launch(zero_job(sharded, 2, true), 2, sharded);
  require_close(step_losses(sharded), step_losses(plain), 1e-5, "sharded vs unsharded");
  const int64_t whole = a["tasks"]["worker:0"]["optimizer_state_bytes"];
  // Adam: m and v of 784x256 + 256 + 256x128 + 128 + 128x10 + 10 params.
  CHECK(whole == 2 * 4 * (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10));
  int64_t total = 0;
  for (const char* task : {"worker:0", "worker:1"}) {
    const int64_t bytes = b["tasks"][task]["optimizer_state_bytes"];
    CHECK(std::fabs(static_cast<double>(bytes) - whole / 2.0) < 0.01 * whole);
    total += bytes;
  }
  CHECK(total == whole);
}

TEST_CASE("ZeRO-1 checkpoints resume onto 4 workers sharded and 1 unsharded, and unsharded ones resume sharded") {
  // The uninterrupted reference: 2 epochs of 10 steps, unsharded on 2 workers.
  TempDir reference;
  launch(zero_job(reference, 2, false, 2), 2, reference);
  const std::vector<double> want = step_losses(reference);
  REQUIRE(want.size() == 20);

  // Epoch 1 sharded on 2 workers: a sharded checkpoint, one part per task.
  TempDir dir;
  launch(zero_job(dir, 2, true, 1), 2, dir);
  REQUIRE(std::filesystem::exists(dir.file("ckpt/ckpt-00000010/part-00001-of-00002.safetensors")));
  const auto resume = [&](int workers, bool shard, const std::string& name) {
    json job = zero_job(dir, workers, shard, 2);
    job["checkpoint"]["resume"] = "auto";
    job["checkpoint"]["every_epochs"] = 0;  // keep the step-10 checkpoint for the next resume
    std::filesystem::remove(dir.file("out/metrics.jsonl"));
    launch(job, workers, dir, name);
    const std::vector<double> losses = step_losses(dir);
    REQUIRE(losses.size() >= 10);
    require_close(last(losses, 10), last(want, 10), 1e-4, name);
  };
  resume(4, true, "sharded4.json");
  resume(1, false, "plain1.json");

  // And back: an unsharded checkpoint (epoch 1 on 2 workers) resumed sharded on 2.
  TempDir back;
  launch(zero_job(back, 2, false, 1), 2, back);
  json job = zero_job(back, 2, true, 2);
  job["checkpoint"]["resume"] = "auto";
  std::filesystem::remove(back.file("out/metrics.jsonl"));
  launch(job, 2, back, "sharded2.json");
  require_close(last(step_losses(back), 10), last(want, 10), 1e-4, "unsharded checkpoint, sharded resume");
}
