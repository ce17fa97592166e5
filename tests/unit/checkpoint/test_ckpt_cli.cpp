// `dtrain ckpt inspect` and `dtrain ckpt export` on a store written by CheckpointStore.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include "checkpoint/checkpoint_store.h"
#include "core/strings.h"
#include "support/temp_dir.h"

using namespace dtrain;
using namespace dtrain::checkpoint;
namespace fs = std::filesystem;

#ifdef DTRAIN_BINARY
namespace {

// Runs a shell command; returns its exit code and stdout (+stderr unless
// `stdout_only`) in `output`.
int run(const std::string& command, std::string& output, bool stdout_only = false) {
  output.clear();
  FILE* pipe = ::popen((command + (stdout_only ? " 2>/dev/null" : " 2>&1")).c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output.append(buf, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("dtrain ckpt inspect and export") {
  test::TempDir dir;
  CheckpointStore store(dir.file("ckpts"), 3);
  const std::vector<float> kernel = {1, 2, 3, 4, 5, 6}, bias = {-1, 0, 1}, m = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
  Manifest man;
  man.world_size = 2;
  man.config_sha256 = "feedbeef";
  for (int64_t step : {100, 200}) {
    man.step = step;
    store.save(man, {{"dense/kernel", {2, 3}, kernel.data()}, {"dense/bias", {3}, bias.data()}},
               {{"dense/kernel/m", {2, 3}, m.data()}});
  }
  std::string out;
  REQUIRE(run(str(DTRAIN_BINARY, " ckpt inspect ", dir.file("ckpts")), out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("ckpt-00000100  step 100      good"));
  CHECK_THAT(out, Catch::Contains("latest good: ckpt-00000200"));
  CHECK_THAT(out, Catch::Contains("step            200"));
  CHECK_THAT(out, Catch::Contains("config_sha256   feedbeef"));
  CHECK_THAT(out, Catch::Contains("dense/kernel"));
  CHECK_THAT(out, Catch::Contains("(2, 3)"));
  CHECK_THAT(out, Catch::Contains("3.5"));  // the kernel's mean
  CHECK_THAT(out, Catch::Contains("dense/kernel/m"));

  // --json: the same as one JSON object (nothing else is printed).
  REQUIRE(run(str(DTRAIN_BINARY, " ckpt inspect --json ", dir.file("ckpts")), out) == 0);
  const nlohmann::json j = nlohmann::json::parse(out);
  CHECK(fs::path(j["path"].get<std::string>()).filename() == "ckpt-00000200");
  CHECK(j["step"] == 200);
  CHECK(j["world_size"] == 2);
  CHECK(j["config_sha256"] == "feedbeef");
  REQUIRE(j["checkpoints"].size() == 2);
  CHECK(j["checkpoints"][0]["good"] == true);
  CHECK(j["files"].contains("model.safetensors"));
  REQUIRE(j["model"].size() == 2);
  CHECK(j["model"][0]["name"] == "dense/kernel");
  CHECK(j["model"][0]["shape"] == nlohmann::json::array({2, 3}));
  CHECK(j["model"][0]["count"] == 6);
  CHECK(j["model"][0]["sum"] == 21.0);
  CHECK(j["model"][0]["min"] == 1.0);
  CHECK(j["model"][0]["max"] == 6.0);
  CHECK(j["model"][1]["sum"] == 0.0);
  REQUIRE(j["optimizer"].size() == 1);
  CHECK(j["optimizer"][0]["sum"] == 3.0);

  REQUIRE(run(str(DTRAIN_BINARY, " ckpt export ", dir.file("ckpts"), " --to ", dir.file("w.safetensors")), out) == 0);
  const SafetensorsFile w = read_safetensors(dir.file("w.safetensors"));
  REQUIRE(w.tensors.size() == 2);
  CHECK(w.tensors[0].name == "dense/kernel");
  CHECK(std::memcmp(w.tensors[0].tensor.data(), kernel.data(), 6 * sizeof(float)) == 0);
  CHECK(w.metadata.at("dtrain_step") == "200");

  // Nothing good: exit code 3 (data) and a message.
  fs::remove(fs::path(dir.file("ckpts")) / "ckpt-00000100" / "DONE");
  fs::remove(fs::path(dir.file("ckpts")) / "ckpt-00000200" / "DONE");
  CHECK(run(str(DTRAIN_BINARY, " ckpt export ", dir.file("ckpts"), " --to ", dir.file("x.safetensors")), out) == 3);
  CHECK_THAT(out, Catch::Contains("no good checkpoint") && Catch::Contains("no DONE"));
}

TEST_CASE("dtrain ckpt inspect and export take a job's output.dir, whose checkpoints/ holds them") {
  test::TempDir dir;
  const std::string out_dir = dir.file("out");
  const std::vector<float> kernel = {1, 2, 3, 4, 5, 6};
  Manifest man;
  man.step = 469;
  CheckpointStore(out_dir + "/checkpoints", 3).save(man, {{"dense/kernel", {2, 3}, kernel.data()}}, {});
  std::string out;
  REQUIRE(run(str(DTRAIN_BINARY, " ckpt inspect ", out_dir), out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains(str("dtrain: ", out_dir, " holds no checkpoint; reading ", out_dir, "/checkpoints")));
  CHECK_THAT(out, Catch::Contains("latest good: ckpt-00000469"));
  CHECK_THAT(out, Catch::Contains("step            469"));

  // --json: stdout is still one JSON object (the note goes to stderr).
  REQUIRE(run(str(DTRAIN_BINARY, " ckpt inspect --json ", out_dir), out, /*stdout_only=*/true) == 0);
  CHECK(nlohmann::json::parse(out)["step"] == 469);

  REQUIRE(run(str(DTRAIN_BINARY, " ckpt export ", out_dir, " --to ", dir.file("w.safetensors")), out) == 0);
  CHECK_THAT(out, Catch::Contains("reading " + out_dir + "/checkpoints"));
  const SafetensorsFile w = read_safetensors(dir.file("w.safetensors"));
  REQUIRE(w.tensors.size() == 1);
  CHECK(w.metadata.at("dtrain_step") == "469");

  // A directory with neither says what to give instead.
  fs::create_directories(dir.file("empty"));
  CHECK(run(str(DTRAIN_BINARY, " ckpt inspect ", dir.file("empty")), out) == 3);
  CHECK_THAT(out, Catch::Contains("no good checkpoint in " + dir.file("empty")) &&
                      Catch::Contains("its output.dir"));
}
#endif
