// Checkpoint files end to end:
//  - kill -9 while writing a checkpoint, injected at a chosen byte
//    (--inject kill:worker:0@ckpt_byte=N), leaves a loadable checkpoint: the
//    previous one, which `dtrain ckpt inspect` names and a resume starts from;
//  - model.safetensors loads in Python (tests/python/check_safetensors.py: the
//    safetensors package or a NumPy parser of the public format) as exactly the
//    tensors `dtrain ckpt inspect --json` reports. /usr/bin/python3 with NumPy is a
//    test dependency (scripts/install-deps.sh): without it this test FAILs.
#include <catch2/catch.hpp>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

// The MLP on 2048 samples, 2 epochs of 16 steps at a global batch of 128, a
// checkpoint every 10 steps into dir/ckpt.
json crash_job(const TempDir& dir) {
  json job = small_mlp_job(2048, 256);
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  job["train"]["batch_size_per_replica"] = 64;
  job["train"]["epochs"] = 2;
  job["checkpoint"] = {{"dir", dir.file("ckpt")}, {"every_steps", 10}};
  return job;
}

RunOutput launch2(const std::string& config, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"launch", "--workers", "2", "--config", config, "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_dtrain(args, {180.0, ""});
}

uint64_t dir_bytes(const fs::path& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) total += fs::file_size(e.path());
  return total;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("kill -9 while writing the second checkpoint, at a chosen byte, leaves the first one loadable") {
  // The size of one checkpoint: a run killed at step 15 has written just ckpt-00000010.
  TempDir probe;
  const RunOutput first = launch2(write_job(probe, crash_job(probe)), {"--inject", "kill:worker:0@step=15"});
  INFO(describe(first));
  REQUIRE(first.exit_code != 0);
  const fs::path one = probe.file("ckpt/ckpt-00000010");
  REQUIRE(fs::exists(one / "DONE"));
  const uint64_t checkpoint_bytes = dir_bytes(one);
  const uint64_t model_bytes = fs::file_size(one / "model.safetensors");

  // Killed halfway through the model file of the second checkpoint (step 20).
  TempDir dir;
  const std::string config = write_job(dir, crash_job(dir));
  const uint64_t kill_at = checkpoint_bytes + model_bytes / 2;
  const RunOutput killed = launch2(
      config, {"--inject", "kill:worker:0@ckpt_byte=" + std::to_string(kill_at), "--summary", dir.file("s.json")});
  INFO(describe(killed));
  REQUIRE(killed.exit_code != 0);
  const json summary = read_json_file(dir.file("s.json"));
  CHECK(summary["exit_codes"]["worker:0"] == -9);  // died by SIGKILL
  CHECK_THAT(summary["results"]["worker:0"]["meaning"].get<std::string>(),
             Catch::Contains("killed by the injected fault kill@ckpt_byte=" + std::to_string(kill_at)));
  CHECK(summary["tasks"]["worker:0"].is_null());  // it never got to write a run summary

  // The first checkpoint complete, the second one only a partial temporary directory.
  const std::vector<std::string> names = names_in(dir.file("ckpt"));
  INFO("ckpt/ holds: " << names.size() << " entries");
  REQUIRE(names.size() == 2);
  CHECK(names[0].rfind(".tmp-ckpt-00000020-", 0) == 0);
  CHECK(names[1] == "ckpt-00000010");
  CHECK(fs::exists(dir.file("ckpt/ckpt-00000010/DONE")));
  const fs::path partial = fs::path(dir.file("ckpt")) / names[0];
  CHECK(names_in(partial) == std::vector<std::string>{"model.safetensors"});
  CHECK(fs::file_size(partial / "model.safetensors") == model_bytes / 2);  // cut at exactly that byte

  const RunOutput inspect = run_dtrain({"ckpt", "inspect", dir.file("ckpt")});
  INFO(describe(inspect));
  CHECK(inspect.exit_code == 0);
  CHECK_THAT(inspect.out, Catch::Contains("checkpoints in") && Catch::Contains(": 1") &&
                              Catch::Contains("latest good: ckpt-00000010") &&
                              Catch::Contains("step            10"));

  const RunOutput resumed = launch2(config, {"--set", "checkpoint.resume=auto", "--summary", dir.file("s2.json")});
  INFO(describe(resumed));
  REQUIRE(resumed.exit_code == 0);
  CHECK_THAT(resumed.err, Catch::Contains("resumed from") && Catch::Contains("ckpt-00000010"));
  const json s2 = read_json_file(dir.file("s2.json"));
  CHECK(s2["tasks"]["worker:0"]["steps"] == 32);  // 2 epochs x 16 steps, as uninterrupted
  CHECK(fs::exists(dir.file("ckpt/ckpt-00000030/DONE")));
  for (const std::string& name : names_in(dir.file("ckpt")))
    CHECK(name.rfind(".tmp-", 0) != 0);  // the next save cleared the partial one away
}

TEST_CASE("model.safetensors loads in Python as the tensors dtrain ckpt inspect --json reports") {
  // The checker needs /usr/bin/python3 with NumPy: a missing one is a failure, not a skip.
  INFO("tests/python/check_safetensors.py needs /usr/bin/python3 and NumPy: run scripts/install-deps.sh");
  REQUIRE(fs::exists(kPython));
  const RunOutput numpy = run_program(kPython, {"-c", "import numpy"});
  INFO(describe(numpy));
  REQUIRE(numpy.exit_code == 0);

  TempDir dir;
  json job = small_mlp_job(1024, 200);
  job["checkpoint"] = {{"dir", dir.file("ckpt")}, {"every_epochs", 1}};
  const RunOutput run = run_dtrain({"run", "--config", write_job(dir, job), "--threads", "1"}, {120.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);

  const RunOutput inspect = run_dtrain({"ckpt", "inspect", "--json", dir.file("ckpt")});
  INFO(describe(inspect));
  REQUIRE(inspect.exit_code == 0);
  const json expected = json::parse(inspect.out);  // stdout is exactly one JSON object
  REQUIRE(expected["model"].size() > 0);
  CHECK(fs::path(expected["path"].get<std::string>()).filename() == "ckpt-00000008");  // 1024 samples / 128
  const std::string expected_path = dir.write("expected.json", inspect.out);

  const RunOutput check = run_program(
      kPython, {std::string(DTRAIN_SOURCE_DIR) + "/tests/python/check_safetensors.py", dir.file("ckpt"), expected_path});
  INFO(describe(check));
  CHECK(check.exit_code == 0);
  CHECK_THAT(check.out, Catch::Contains("model.safetensors") && Catch::Contains("match dtrain ckpt inspect"));

  // And it does catch a difference: a tensor whose sum dtrain reports otherwise.
  json wrong = expected;
  wrong["model"][0]["sum"] = wrong["model"][0]["sum"].get<double>() * 1.01 + 1.0;
  const RunOutput mismatch = run_program(
      kPython, {std::string(DTRAIN_SOURCE_DIR) + "/tests/python/check_safetensors.py", dir.file("ckpt"),
                dir.write("wrong.json", wrong.dump())});
  INFO(describe(mismatch));
  CHECK(mismatch.exit_code == 1);
  CHECK_THAT(mismatch.err, Catch::Contains("MISMATCH") && Catch::Contains(wrong["model"][0]["name"].get<std::string>()));
}
