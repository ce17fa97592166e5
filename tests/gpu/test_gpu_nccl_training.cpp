// multi_worker_mirrored on GPUs with the gradients on NCCL (the gradient
// reducer's device path): two tasks started by `dtrain launch`, one GPU each,
// train the same job with communication "nccl" and with "ring" (Gloo, through
// host memory); the loss curves and accuracies agree within float tolerance and,
// in each run, both tasks end with the same parameters. With one GPU the two
// tasks share it (NCCL refuses two ranks on one GPU), so that case runs one task
// with "nccl" (a group of one: no all-reduce) and checks it trains. Labelled gpu:
// skipped (reported as skipped) without a usable GPU or a build without NCCL.
// Also a pipeline's two stages on two GPUs, their activations and gradients
// over NCCL against Gloo: the same losses.
#include <catch2/catch.hpp>
#include <cmath>

#include "gpu/gpu_skip.h"
#include "gpu/nccl_skip.h"
#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

// The small MLP job on "gpu" with `communication`, its output in dir/out-<tag>.
nlohmann::json gpu_job(const TempDir& dir, const std::string& communication, const std::string& tag) {
  nlohmann::json job = small_mlp_job(1024, 256);
  job["device"] = "gpu";
  job["train"]["epochs"] = 2;
  job["train"]["log_every_steps"] = 2;
  job["strategy"]["type"] = "multi_worker_mirrored";
  job["strategy"]["communication"] = communication;
  job["strategy"]["bytes_per_pack"] = 16384;  // several buckets
  job["output"]["dir"] = dir.file("out-" + tag);
  return job;
}

// `dtrain launch --workers N` of the job; returns the launch summary.
nlohmann::json launch(const TempDir& dir, const nlohmann::json& job, int workers, const std::string& tag) {
  const std::string summary = dir.file("launch-" + tag + ".json");
  RunSpec spec;
  spec.deadline_seconds = 600.0;
  spec.cwd = dir.path();
  const RunOutput r = run_dtrain({"launch", "--workers", std::to_string(workers), "--config",
                                  write_job(dir, job, "job-" + tag + ".json"), "--summary", summary},
                                 spec);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  return read_json_file(summary);
}

}  // namespace

TEST_CASE("two tasks on two GPUs: gradients on NCCL train like Gloo's", "[gpu]") {
  if (!testing::two_gpus_or_skip("one per task") || !testing::nccl_or_skip()) return;
  TempDir dir;
  const nlohmann::json nccl = launch(dir, gpu_job(dir, "nccl", "nccl"), 2, "nccl");
  const nlohmann::json gloo = launch(dir, gpu_job(dir, "ring", "gloo"), 2, "gloo");
  for (const nlohmann::json* run : {&nccl, &gloo}) {
    const nlohmann::json& chief = (*run)["tasks"]["worker:0"];
    const nlohmann::json& worker = (*run)["tasks"]["worker:1"];
    REQUIRE(chief.is_object());
    REQUIRE(worker.is_object());
    CHECK(chief.at("world_size") == 2);
    CHECK(worker.at("params_sha256") == chief.at("params_sha256"));  // every task applied the same mean
  }
  // Same data, same initial weights; only the order of the sums differs.
  const auto nccl_steps = read_json_lines(dir.file("out-nccl/metrics.jsonl"));
  const auto gloo_steps = read_json_lines(dir.file("out-gloo/metrics.jsonl"));
  REQUIRE(nccl_steps.size() == gloo_steps.size());
  for (size_t i = 0; i < nccl_steps.size(); ++i) {
    if (!nccl_steps[i].contains("loss")) continue;
    const double a = nccl_steps[i].at("loss").get<double>(), b = gloo_steps[i].at("loss").get<double>();
    INFO("record " << i << ": nccl loss " << a << ", gloo loss " << b);
    CHECK(std::fabs(a - b) <= 1e-3 * std::fabs(b) + 1e-4);
  }
  const double nccl_accuracy = nccl["tasks"]["worker:0"].at("test_accuracy").get<double>();
  const double gloo_accuracy = gloo["tasks"]["worker:0"].at("test_accuracy").get<double>();
  CHECK(std::fabs(nccl_accuracy - gloo_accuracy) <= 0.01);
}

TEST_CASE("a pipeline's two stages on two GPUs send their tensors over NCCL, as Gloo would", "[gpu]") {
  if (!testing::two_gpus_or_skip("one per stage") || !testing::nccl_or_skip()) return;
  TempDir dir;
  std::vector<std::vector<double>> losses;
  for (const std::string communication : {"nccl", "ring"}) {
    nlohmann::json job = gpu_job(dir, communication, "pipeline-" + communication);
    job["strategy"] = {{"type", "pipeline"}, {"stages", {"dense_1"}}, {"micro_batches", 4},
                       {"communication", communication}};
    const nlohmann::json run = launch(dir, job, 2, "pipeline-" + communication);
    const std::string links = communication == "nccl" ? "nccl" : "gloo (host copies)";
    for (const char* task : {"worker:0", "worker:1"})
      CHECK(run["tasks"][task]["pipeline"]["links"] == links);
    losses.emplace_back();
    for (const nlohmann::json& record : read_json_lines(dir.file("out-pipeline-" + communication + "/metrics.jsonl")))
      if (record.contains("loss")) losses.back().push_back(record["loss"].get<double>());
  }
  // The same values travel either way: the same losses, bit for bit.
  CHECK(losses[0] == losses[1]);
  CHECK(!losses[0].empty());
}

TEST_CASE("one task on one GPU with communication nccl trains", "[gpu]") {
  if (!testing::gpu_or_skip() || !testing::nccl_or_skip()) return;
  TempDir dir;
  const nlohmann::json run = launch(dir, gpu_job(dir, "nccl", "one"), 1, "one");
  const nlohmann::json& chief = run["tasks"]["worker:0"];
  REQUIRE(chief.is_object());
  CHECK(chief.at("test_accuracy").get<double>() > 0.5);
}

}  // namespace dtrain::integration
