// The evaluator task (TF's side-car evaluation) end to end with `dtrain launch
// --evaluator` on the Fashion-MNIST MLP (1024 training samples): it evaluates every
// checkpoint the chief saves, once, oldest first, and stops after the final one, whose
// figures are the chief's final test figures, under multi_worker_mirrored and under
// parameter_server; killing it leaves the training's exit codes 0; a job that gives
// it nothing to evaluate is exit 2 before anything starts.
#include <catch2/catch.hpp>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

using Catch::Matchers::Contains;

std::vector<std::string> evaluated_job(const TempDir& tmp, const std::string& strategy, int epochs) {
  return {"--config", shipped_config_path("fashion_mnist_mlp.json"),
          "--set",    "data.train.take=1024",
          "--set",    "data.test.take=512",
          "--set",    "train.epochs=" + std::to_string(epochs),
          "--set",    "train.batch_size_per_replica=16",
          "--set",    "strategy.type=" + strategy,
          "--set",    "checkpoint.every_steps=10",
          "--set",    "checkpoint.keep=1000",  // every checkpoint stays, to count them
          "--set",    "output.dir=" + tmp.file("out")};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

RunOutput launch(std::vector<std::string> args, const std::vector<std::string>& job) {
  RunSpec spec;
  spec.deadline_seconds = 120;
  return run_dtrain(concat(std::move(args), job), spec);
}

// The steps of the checkpoints in `dir`, oldest first.
std::vector<int64_t> checkpoint_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0) steps.push_back(std::stoll(name.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

// One evaluation per checkpoint, in order, in the summary and in eval/metrics.jsonl;
// the last is the chief's final test accuracy (and loss, to float rounding).
void check_evaluations(const TempDir& tmp, const nlohmann::json& launch_summary, const std::string& chief) {
  const nlohmann::json& evaluator = launch_summary["tasks"]["evaluator:0"];
  const nlohmann::json& trained = launch_summary["tasks"][chief];
  const std::vector<int64_t> saved = checkpoint_steps(tmp.file("out/checkpoints"));
  REQUIRE(saved.size() >= 3);
  CHECK(saved.back() == trained["steps"].get<int64_t>());  // the final checkpoint
  std::vector<int64_t> evaluated;
  for (const nlohmann::json& e : evaluator["evaluations"]) evaluated.push_back(e["step"]);
  CHECK(evaluated == saved);
  const std::vector<nlohmann::json> records = read_json_lines(tmp.file("out/eval/metrics.jsonl"));
  REQUIRE(records.size() == saved.size());
  for (size_t i = 0; i < records.size(); ++i) {
    CHECK(records[i]["kind"] == "eval");
    CHECK(records[i]["step"] == saved[i]);
    CHECK(records[i]["test_accuracy"] == evaluator["evaluations"][i]["test_accuracy"]);
  }
  const nlohmann::json& last = evaluator["evaluations"].back();
  CHECK(last["test_accuracy"].get<double>() == trained["test_accuracy"].get<double>());
  CHECK(last["test_loss"].get<double>() == Approx(trained["test_loss"].get<double>()).epsilon(1e-5));
  CHECK(evaluator["test_accuracy"] == last["test_accuracy"]);
  // Training changed the model between the first checkpoint and the last.
  CHECK(evaluator["evaluations"].front()["test_loss"].get<double>() > last["test_loss"].get<double>());
}

TEST_CASE("evaluator: one evaluation per checkpoint of a multi_worker_mirrored job, the last equal to the chief's",
          "[integration]") {
  TempDir tmp;
  const RunOutput r = launch({"launch", "--workers", "2", "--evaluator", "--summary", tmp.file("launch.json")},
                             evaluated_job(tmp, "multi_worker_mirrored", 2));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  for (const char* task : {"worker:0", "worker:1", "evaluator:0"}) CHECK(s["exit_codes"][task] == 0);
  check_evaluations(tmp, s, "worker:0");
}

TEST_CASE("evaluator: one evaluation per checkpoint of a parameter_server job, the last equal to the chief's",
          "[integration]") {
  TempDir tmp;
  // 4 epochs: the coordinator shares 2 cores with 4 other processes and may see
  // only a few of the units complete (at 2 epochs, 2 checkpoints in 1 run of 9).
  const RunOutput r =
      launch({"launch", "--workers", "2", "--chief", "--ps", "1", "--evaluator", "--summary", tmp.file("launch.json")},
             evaluated_job(tmp, "parameter_server", 4));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  for (const char* task : {"chief:0", "worker:0", "worker:1", "ps:0", "evaluator:0"}) CHECK(s["exit_codes"][task] == 0);
  check_evaluations(tmp, s, "chief:0");
}

TEST_CASE("evaluator: killing it leaves the training's exit codes 0, with a warning on the chief", "[integration]") {
  TempDir tmp;
  const RunOutput r = launch({"launch", "--workers", "2", "--evaluator", "--inject", "kill:evaluator:0@seconds=1",
                              "--summary", tmp.file("launch.json")},
                             // 200 epochs: ~4 s of training over shared memory on 2 cores, so the
                             // evaluator is killed (at 1 s) while the workers still train.
                             concat(evaluated_job(tmp, "multi_worker_mirrored", 200), {"--set", "checkpoint.every_steps=100"}));
  INFO(describe(r));
  CHECK(r.exit_code == 0);
  const nlohmann::json s = read_json_file(tmp.file("launch.json"));
  CHECK(s["exit_codes"]["evaluator:0"] == -9);
  CHECK(s["exit_codes"]["worker:0"] == 0);
  CHECK(s["exit_codes"]["worker:1"] == 0);
  CHECK(s["tasks"]["worker:0"]["epochs"] == 200);
  CHECK_THAT(r.out + r.err, Contains("evaluator:0") && Contains("the job goes on without it"));
}

TEST_CASE("evaluator: a job without checkpoints or without evaluation data is exit 2", "[integration]") {
  TempDir tmp;
  nlohmann::json job = shipped_config("fashion_mnist_mlp.json");
  job["cluster"] = {{"worker", {"127.0.0.1:1"}}, {"evaluator", {"127.0.0.1:2"}}};
  job["task"] = {{"type", "evaluator"}, {"index", 0}};
  job.erase("output");
  job.erase("checkpoint");
  const std::string no_dir = write_job(tmp, job, "no_dir.json");
  // A task's error line carries its name: "dtrain: error: [evaluator:0] ...".
  const auto check_task_error = [](const RunOutput& r, const std::vector<std::string>& needles) {
    INFO(describe(r));
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains("dtrain: error: ") && Contains("the cluster has an evaluator task"));
    for (const std::string& n : needles) CHECK_THAT(r.err, Contains(n));
  };
  check_task_error(run_dtrain({"run", "--config", no_dir}), {"set checkpoint.dir or output.dir"});
  check_task_error(run_dtrain({"validate", "--config", no_dir, "--task", "worker:0"}),
                   {"set checkpoint.dir or output.dir"});
  job["output"] = {{"dir", tmp.file("out")}};
  job["data"].erase("test");
  check_task_error(run_dtrain({"run", "--config", write_job(tmp, job, "no_test.json")}),
                   {"no data to evaluate on", "set data.test or data.validation"});
}

}  // namespace
}  // namespace dtrain::integration
