// Checkpoints end to end: a 2-worker run killed mid-epoch and resumed ends with
// exactly the parameters of the same run uninterrupted; a 2-worker checkpoint
// resumes on 1 and on 4 workers; a corrupt newest checkpoint is skipped for the
// previous good one; SIGTERM and Ctrl-C stop at a step's end with a checkpoint.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include <csignal>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "integration/start_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

RunOutput launch(const std::string& config, int workers, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"launch", "--workers", std::to_string(workers), "--config", config, "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_dtrain(args, {180.0, ""});
}

std::string chief_hash(const std::string& summary_path) {
  const json s = read_json_file(summary_path);
  std::string hash;
  for (const auto& [task, t] : s["tasks"].items()) {
    REQUIRE(t.is_object());
    if (hash.empty()) hash = t["params_sha256"];
    CHECK(t["params_sha256"] == hash);  // every worker holds the same parameters
  }
  return hash;
}

}  // namespace

TEST_CASE("a 2-worker run killed mid-epoch and resumed ends with the uninterrupted run's parameters") {
  TempDir straight, interrupted;
  const RunOutput a = launch(write_job(straight, resumable_job(straight, 2)), 2, {"--summary", straight.file("s.json")});
  INFO(describe(a));
  REQUIRE(a.exit_code == 0);

  const std::string config = write_job(interrupted, resumable_job(interrupted, 2));
  // Step 45 is in the middle of epoch 2; the newest checkpoint then is step 40.
  const RunOutput killed = launch(config, 2, {"--inject", "kill:worker:1@step=45"});
  INFO(describe(killed));
  REQUIRE(killed.exit_code != 0);
  REQUIRE(std::filesystem::exists(interrupted.file("ckpt/ckpt-00000040/DONE")));
  const RunOutput resumed = launch(config, 2, {"--set", "checkpoint.resume=auto", "--summary", interrupted.file("s.json")});
  INFO(describe(resumed));
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.err, Catch::Contains("resumed from") && Catch::Contains("ckpt-00000040"));
  CHECK(chief_hash(interrupted.file("s.json")) == chief_hash(straight.file("s.json")));
}

TEST_CASE("a checkpoint written by 2 workers resumes on 1 and on 4 workers") {
  TempDir dir;
  const std::string config = write_job(dir, resumable_job(dir, 2));
  REQUIRE(launch(config, 2, {"--inject", "kill:worker:0@step=25"}).exit_code != 0);
  for (int workers : {1, 4}) {
    json job = resumable_job(dir, workers);
    job["checkpoint"]["resume"] = "auto";
    job["checkpoint"]["every_steps"] = 0;  // leave the step-20 checkpoint for the next case
    const RunOutput r = launch(write_job(dir, job, "job" + std::to_string(workers) + ".json"), workers,
                               {"--summary", dir.file("s.json")});
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.err, Catch::Contains("resumed from") && Catch::Contains("written by 2 replica(s)"));
    const json s = read_json_file(dir.file("s.json"));
    CHECK(s["tasks"]["worker:0"]["world_size"] == workers);
    CHECK(s["tasks"]["worker:0"]["steps"] == 96);  // 3 epochs x 32 steps of 128 samples, as before
  }
}

TEST_CASE("a corrupt newest checkpoint is reported and the previous good one is used") {
  TempDir dir;
  const std::string config = write_job(dir, resumable_job(dir, 2));
  REQUIRE(launch(config, 2, {"--inject", "kill:worker:1@step=35"}).exit_code != 0);
  const std::string newest = dir.file("ckpt/ckpt-00000030/model.safetensors");
  REQUIRE(std::filesystem::exists(newest));
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  const RunOutput r = launch(config, 2, {"--set", "checkpoint.resume=auto"});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("ckpt-00000030") && Catch::Contains("resumed from") &&
                        Catch::Contains("ckpt-00000020"));
}

TEST_CASE("SIGTERM finishes the step, saves a checkpoint and exits 6, and --resume continues from it") {
  TempDir dir;
  json job = small_mlp_job(4096, 256);
  job["train"]["epochs"] = 1000;  // far more than the test waits for
  job["output"] = {{"dir", dir.file("out")}};
  const std::string config = write_job(dir, job);
  const std::string log = dir.file("run.log");
  // A shell starts dtrain, lets it train for 2 s and sends SIGTERM to it.
  const RunOutput r = run_program(
      "/bin/sh", {"-c", std::string("\"") + DTRAIN_BINARY + "\" run --config " + config +
                            " --threads 1 >" + log + " 2>&1 & pid=$!; sleep 2; kill -TERM $pid; wait $pid; echo exit=$?"},
      {60.0, ""});
  INFO(describe(r) << read_file(log));
  REQUIRE(r.out.find("exit=6") != std::string::npos);
  const std::string text = read_file(log);
  CHECK_THAT(text, Catch::Contains("stopped by SIGTERM after step") && Catch::Contains("resume with --resume"));
  bool saved = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("out/checkpoints")))
    saved = saved || std::filesystem::exists(entry.path() / "DONE");
  CHECK(saved);
  job["train"]["epochs"] = 1;
  const RunOutput resumed =
      run_dtrain({"run", "--config", write_job(dir, job, "short.json"), "--threads", "1", "--resume"}, {120.0, ""});
  INFO(describe(resumed));
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.err, Catch::Contains("resumed from"));
}

TEST_CASE("Ctrl-C finishes the step, saves a checkpoint, says so in one line and exits 130") {
  TempDir dir;
  json job = small_mlp_job(4096, 256);
  job["train"]["epochs"] = 1000;  // far more than the test waits for
  job["output"] = {{"dir", dir.file("out")}};
  auto child = start_dtrain({"run", "--config", write_job(dir, job), "--threads", "1"}, {});
  if (!child->wait_for_out("Epoch 2/", 60.0)) FAIL("it did not train\n" << child->err());
  child->send(SIGINT);  // what the terminal sends for Ctrl-C
  const RunOutput r = child->finish(60.0);
  INFO(describe(r));
  CHECK(r.exit_code == 130);
  CHECK_THAT(r.err, Catch::Contains("dtrain: interrupted (Ctrl-C) after step ") &&
                        Catch::Contains("saved: resume with --resume"));
  CHECK_THAT(r.err, !Catch::Contains("error"));
  bool saved = false;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("out/checkpoints")))
    saved = saved || std::filesystem::exists(entry.path() / "DONE");
  CHECK(saved);
}
