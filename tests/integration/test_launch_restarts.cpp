// `dtrain launch --max-restarts N` end to end: a 2-worker job whose worker:1 is
// killed mid-epoch is started again from the newest checkpoint and ends with exactly
// the parameters of the uninterrupted run; without --max-restarts the job fails as
// before; a config error in the tasks is not restarted.
#include <catch2/catch.hpp>
#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using nlohmann::json;

namespace {

RunOutput launch(const std::string& config, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"launch", "--workers", "2", "--config", config, "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return run_dtrain(args, {180.0, ""});
}

}  // namespace

TEST_CASE("launch --max-restarts restarts a killed job from its checkpoint, exactly", "[integration]") {
  TempDir straight, restarted;
  const RunOutput a = launch(write_job(straight, resumable_job(straight, 2)), {"--summary", straight.file("s.json")});
  INFO(describe(a));
  REQUIRE(a.exit_code == 0);

  // Step 45 is in the middle of epoch 2; the newest checkpoint then is step 40.
  const RunOutput r = launch(write_job(restarted, resumable_job(restarted, 2)),
                             {"--inject", "kill:worker:1@step=45", "--max-restarts", "2", "--summary",
                              restarted.file("s.json")});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Catch::Contains("dtrain launch: worker:1 was killed by signal 9 (SIGKILL) at ") &&
                        Catch::Contains("restarting the job from the newest checkpoint (restart 1 of 2)"));
  CHECK_THAT(r.err, Catch::Contains("resumed from") && Catch::Contains("ckpt-00000040"));
  const json s = read_json_file(restarted.file("s.json"));
  CHECK(s["exit_code"] == 0);
  CHECK(s["restarts"] == 1);
  REQUIRE(s["attempts"].size() == 2);
  CHECK(s["attempts"][0]["first_failure"] == "worker:1");
  CHECK(s["attempts"][0]["exit_code"] == 128 + 9);
  CHECK(s["attempts"][1]["exit_code"] == 0);
  CHECK(s["tasks"]["worker:0"]["steps"] == 96);
  CHECK(common_params_hash(s) == common_params_hash(read_json_file(straight.file("s.json"))));
}

TEST_CASE("launch without --max-restarts fails as before when a task is killed", "[integration]") {
  TempDir dir;
  const RunOutput r = launch(write_job(dir, resumable_job(dir, 2)),
                             {"--inject", "kill:worker:1@step=15", "--summary", dir.file("s.json")});
  INFO(describe(r));
  CHECK(r.exit_code == 128 + 9);
  CHECK_THAT(r.err, !Catch::Contains("restart"));
  const json s = read_json_file(dir.file("s.json"));
  CHECK(s["restarts"] == 0);
  CHECK(s["attempts"].size() == 1);
}

TEST_CASE("launch --max-restarts does not restart a config error of the tasks", "[integration]") {
  TempDir dir;
  json job = resumable_job(dir, 2);
  job["model"]["layers"].back()["units"] = 5;  // labels 5..9 outside the classes: exit 2 in every task
  const RunOutput r = launch(write_job(dir, job), {"--max-restarts", "3", "--summary", dir.file("s.json")});
  INFO(describe(r));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("not restarting: worker:") &&
                        Catch::Contains("usage or config error (exit code 2)"));
  CHECK_THAT(r.err, !Catch::Contains("restarting the job"));
  CHECK(read_json_file(dir.file("s.json"))["restarts"] == 0);
}
