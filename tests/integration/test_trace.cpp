// The trace timeline and the flight recorder end to end:
//  - a 2-worker launch with output.trace gets one <output.dir>/trace.json with a
//    process per task, one all-reduce per gradient bucket per step, every span
//    inside its step, and the tasks' clocks aligned: each records its offset to
//    the chief, and every bucket's all-reduce overlaps in time on both tasks
//    (tests/python/check_trace.py, standard library only);
//  - one task alone writes trace.json itself; output.trace needs output.dir;
//  - a worker killed mid-training: the survivor's log lists the collectives it
//    started last, the one it was in when the peer was lost included.
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>

#include <filesystem>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
using Catch::Matchers::Contains;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json traced_job(const TempDir& dir, int64_t steps) {
  json job = small_mlp_job(4096, 0);
  job["data"].erase("test");
  job["strategy"] = {{"type", "multi_worker_mirrored"}, {"bytes_per_pack", 4096}};
  job["train"]["batch_size_per_replica"] = 32;
  job["train"]["steps_per_epoch"] = steps;
  job["output"] = {{"dir", dir.file("out")}, {"trace", true}};
  return job;
}

}  // namespace

TEST_CASE("a 2-worker trace: a process per task, an all-reduce per bucket per step, spans inside steps") {
  TempDir dir;
  const RunOutput run = run_dtrain(
      {"launch", "--workers", "2", "--threads", "1", "--config", write_job(dir, traced_job(dir, 20))}, {120.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.err, Contains("trace of 2 tasks in"));
  const RunOutput check = run_program(
      "/usr/bin/python3", {std::string(DTRAIN_SOURCE_DIR) + "/tests/python/check_trace.py", dir.file("out/trace.json"), "2"});
  INFO(describe(check));
  CHECK(check.exit_code == 0);
  // Buckets of at least 4 KiB, filled from the last layer: (dense_2), (dense_1), (dense): 3 per step.
  CHECK_THAT(check.out, Contains("worker:0: 20 steps, 3 bucket(s) per step") &&
                            Contains("worker:1: 20 steps, 3 bucket(s) per step") && Contains("trace ok"));
}

TEST_CASE("one task alone writes trace.json, output.trace needs output.dir") {
  TempDir dir;
  json job = traced_job(dir, 5);
  job["strategy"] = {{"type", "one_device"}};
  const RunOutput run = run_dtrain({"run", "--config", write_job(dir, job), "--threads", "1"}, {60.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  const json trace = read_json_file(dir.file("out/trace.json"));
  int steps = 0;
  for (const json& e : trace["traceEvents"]) steps += e["ph"] == "X" && e["name"] == "step";
  CHECK(steps == 5);

  job["output"].erase("dir");
  const RunOutput bad = run_dtrain({"validate", "--config", write_job(dir, job)});
  check_error(bad, 2, {"output.trace", "needs output.dir"});
}

TEST_CASE("a lost worker: the survivor's log lists the collectives it started last") {
  TempDir dir;
  const RunOutput run = run_dtrain({"launch", "--workers", "2", "--threads", "1", "--inject", "kill:worker:1@step=10",
                                    "--config", write_job(dir, traced_job(dir, 400))},
                                   {120.0, ""});
  INFO(describe(run));
  CHECK(run.exit_code != 0);
  // One console line points at the record in the task's log, with its last entry:
  // the collective the peer was lost in, which did not complete.
  const std::string log = dir.file("out/logs/worker-0.log");
  CHECK_THAT(run.err, Contains("dtrain: warning: [worker:0] the last collectives it started are in its log, " + log +
                               " (the last: #") &&
                          (Contains("bytes: failed") || Contains("bytes: started")));
  CHECK_THAT(run.err + run.out, !Contains("] #1 workers all_reduce"));  // the record itself: the log's
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Contains("dtrain: worker:0: the last collectives it started (oldest first):\n#") &&
                       Contains(" workers all_reduce ") && !Contains("dtrain-log-only"));
}
