// Hang reports end to end: `dtrain launch` of 3 workers, worker:2's data reader
// blocked at step 3 (--inject stall_reader): the chief's store sees no step
// advance for runtime.stall_timeout, every task reports where it is, and the
// chief's one diagnosis names worker:2, the all-reduce the others wait in and its
// main thread in the input pipeline; SIGUSR1 to the launcher asks for another
// without stopping the job; the collective deadline still ends the hang. A
// worker with another bucket size fails at once (Gloo's size check, or the
// shared-memory group's), and the failing task asks for the report first.
#include <signal.h>

#include <catch2/catch.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "integration/start_dtrain.h"

using namespace dtrain::integration;
using Catch::Matchers::Contains;

namespace {

// `dtrain launch` of 3 workers on the small MLP with `inject` (a fault on one task),
// heartbeats every 0.5 s (lost after 3 s), and `sets` on top.
std::vector<std::string> launch_args(const TempDir& tmp, const std::string& inject, int epochs,
                                     const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"launch", "--workers", "3", "--inject", inject,
                                   "--config", shipped_config_path("fashion_mnist_mlp.json"),
                                   "--set", "data.train.take=4096", "--set", "data.test.take=256",
                                   "--set", "train.epochs=" + std::to_string(epochs),
                                   "--set", "output.dir=" + tmp.file("out"),
                                   "--set", "runtime.heartbeat_interval=0.5", "--set", "runtime.heartbeat_timeout=3"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  return args;
}

}  // namespace

TEST_CASE("a worker whose reader blocks is named by the chief's hang report, and SIGUSR1 asks for another",
          "[integration]") {
  const TempDir tmp;
  auto launch = start_dtrain(launch_args(tmp, "stall_reader:worker:2@step=3", 20, {"runtime.stall_timeout=2"}));
  REQUIRE(launch->wait_for_err("worker:2 has not entered all_reduce", 40.0));
  launch->send(SIGUSR1);
  const bool second = launch->wait_for_err("hang report (asked for with SIGUSR1", 15.0);
  // The collective deadline (heartbeat_timeout + 20 s) ends the job: a hang is reported, not waited out forever.
  const RunOutput r = launch->finish(60.0);
  INFO(r.err);
  CHECK(second);
  CHECK_THAT(r.err, Contains("hang report (stall: no task's step has advanced for 2 s"));
  CHECK_THAT(r.err, Contains("worker:2 has not entered all_reduce #"));
  CHECK_THAT(r.err, Contains("its thread main is in step > data (the input pipeline: data::Pipeline::next"));
  // Its native stack: where the injected stall holds the thread, under the step's batch reading.
  CHECK_THAT(r.err, Contains("(native stack, innermost first: "));
  CHECK_THAT(r.err, Contains("nanosleep < dtrain::runtime::before_batch_if_injected < "));
  CHECK_THAT(r.err, Contains("dtrain::trainer::StrategySteps::read_batches < "));
  CHECK_THAT(r.err, Contains("got SIGUSR1: asking worker:0 for a hang report (the job goes on)"));
  CHECK_THAT(r.err, !Contains("worker:0 has not entered"));
  CHECK_THAT(r.err, !Contains("worker:1 has not entered"));
  // The all-reduce's deadline on a waiting task (exit 5, a timeout); the job's
  // code is whichever task ended first (4, peer lost, when another saw the group fail first).
  CHECK((r.exit_code == 5 || r.exit_code == 4));
  CHECK_THAT(r.err, Contains("exit code 5           timeout"));
}

TEST_CASE("a worker that leaves out one all-reduce is named by the hang report as entering another collective",
          "[integration]") {
  const TempDir tmp;
  // Gloo's ring (shared memory fails such a group at once, with no stall to report).
  auto launch = start_dtrain(launch_args(tmp, "skip_allreduce:worker:1@step=3", 20,
                                         {"strategy.communication=ring", "runtime.stall_timeout=2"}));
  const RunOutput r = launch->finish(60.0);
  INFO(r.err);
  CHECK_THAT(r.err, Contains("hang report (stall: no task's step has advanced for 2 s"));
  CHECK_THAT(r.err, Contains("worker:1 entered workers #"));
  CHECK_THAT(r.err, Contains("where the others have all_reduce of"));
  CHECK_THAT(r.err, !Contains("worker:0 entered workers #"));
  CHECK_THAT(r.err, !Contains("worker:2 entered workers #"));
  // Every task's collective deadline (exit 5); the job's code is the first task
  // to end (4 when it saw a peer's connection close first).
  CHECK((r.exit_code == 5 || r.exit_code == 4));
}

TEST_CASE("a worker with another bucket size under Gloo is named by the hang report before the job ends, not an abort",
          "[integration]") {
  const TempDir tmp;
  auto launch = start_dtrain(launch_args(tmp, "bytes_per_pack:worker:1@bytes=65536", 2, {"strategy.communication=ring"}));
  const RunOutput r = launch->finish(60.0);
  INFO(r.err);
  // Gloo throws on its own thread when a peer sends more than was posted: the
  // process says so (with its flight record), asks every task for a report, and
  // exits 1 instead of aborting.
  CHECK_THAT(r.err, Contains("error: a thread of the collectives' library failed: "));
  CHECK_THAT(r.err, Contains("the tasks disagree on a collective's size"));
  CHECK_THAT(r.err, Contains("hang report (a thread of the collectives' library failed on worker:"));
  // worker:1 named as the odd one; or, where worker:0 had not entered that
  // collective yet when it answered (one task against one: no majority), each
  // view given, worker:1's among them.
  CHECK_THAT(r.err, (Contains("worker:1 entered workers #") && Contains("where the others have all_reduce of")) ||
                        (Contains("worker:1 entered it as all_reduce of") && Contains("(worker:0 not yet)")));
  CHECK_THAT(r.err, !Contains("worker:0 entered workers #"));
  CHECK_THAT(r.err, !Contains("SIGABRT"));
  CHECK(r.exit_code != 0);
}

TEST_CASE("a worker with another bucket size in shared memory: every task says the sizes differ, one report names it",
          "[integration]") {
  const TempDir tmp;
  auto launch = start_dtrain(launch_args(tmp, "bytes_per_pack:worker:1@bytes=65536", 2, {}));
  const RunOutput r = launch->finish(60.0);
  INFO(r.err);
  CHECK_THAT(r.err, Contains("the members disagree on an all-reduce's size"));
  CHECK_THAT(r.err, Contains("hang report (a collective failed on worker:"));
  CHECK_THAT(r.err, Contains("worker:1 entered workers #"));
  CHECK_THAT(r.err, !Contains("worker:2 entered workers #"));
  CHECK(r.exit_code == 1);  // a runtime error: the tasks disagree, none was lost
}
