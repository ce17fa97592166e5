// dtrain under a real Slurm: `srun -N1 -n2` starts two `dtrain run` tasks of one
// multi_worker_mirrored job whose config has no cluster key, so each task must find
// the cluster and its own place in it from Slurm's variables (SLURM_PROCID,
// SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST, ...). Both tasks must end with exit 0,
// world_size 2 and the same parameters. Needs a Slurm that takes a 2-task step on
// this machine: scripts/slurm-local.sh starts a one-node one (scripts/test.sh runs
// it before ctest); without one the test says DTRAIN-SKIPPED (a skip in ctest).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "support/temp_dir.h"

namespace dtrain::integration {
namespace {

using nlohmann::json;

// The first executable `name` on $PATH, or "".
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
  }
  return "";
}

// Single quotes for sh.
std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Why Slurm cannot run a 2-task step here, or "" when it can.
std::string why_no_slurm() {
  if (find_on_path("sinfo").empty()) return "sinfo is not on PATH (no Slurm; scripts/slurm-local.sh starts one)";
  const std::string srun = find_on_path("srun");
  if (srun.empty()) return "srun is not on PATH";
  // --immediate: give up when the node cannot take the step at once, instead of queueing.
  RunSpec spec;
  spec.deadline_seconds = 30.0;
  const RunOutput r =
      run_program("/usr/bin/timeout", {"15", srun, "-N1", "-n2", "--immediate=10", "true"}, spec);
  if (r.exit_code == 0) return "";
  std::string err = r.err;
  while (!err.empty() && err.back() == '\n') err.pop_back();
  const size_t last_line = err.rfind('\n');
  if (last_line != std::string::npos) err = err.substr(last_line + 1);
  return "srun -N1 -n2 true failed (exit " + std::to_string(r.exit_code) + (r.exit_code == 124 ? ", timed out" : "") +
         "): " + (err.empty() ? "no message" : err);
}

}  // namespace

TEST_CASE("srun -N1 -n2: two dtrain tasks find each other from Slurm's variables and train as one job",
          "[system][slurm]") {
  const std::string why = why_no_slurm();
  if (!why.empty()) {
    std::cout << "DTRAIN-SKIPPED: " << why << std::endl;
    return;
  }
  TempDir dir;
  json job = small_mlp_job();
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  job["train"]["batch_size_per_replica"] = 16;
  job.erase("cluster");  // none: dtrain reads Slurm's variables itself
  const std::string config = write_job(dir, job);

  // Each task: the shared secret, no stray TF_CONFIG or launcher variables from the
  // test's own environment, and its summary named by its rank.
  const std::string task = "exec env -u TF_CONFIG -u DTRAIN_LAUNCHED -u DTRAIN_JOB_ID -u DTRAIN_INJECT "
                           "-u DTRAIN_LISTEN_FD DTRAIN_JOB_SECRET=slurm-system-test " +
                           sh_quote(dtrain_binary()) + " run --config " + sh_quote(config) +
                           " --threads 1 --summary " + sh_quote(dir.path()) + "/s-$SLURM_PROCID.json";
  RunSpec spec;
  spec.deadline_seconds = 200.0;
  spec.cwd = dir.path();
  const RunOutput r =
      run_program(find_on_path("srun"), {"-N1", "-n2", "--kill-on-bad-exit=1", "sh", "-c", task}, spec);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);

  std::string hash;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = dir.file("s-" + std::to_string(rank) + ".json");
    INFO("task " << rank << ": " << path);
    REQUIRE(std::filesystem::exists(path));
    const json s = read_json_file(path);
    CHECK(s["world_size"] == 2);
    REQUIRE(s["params_sha256"].is_string());
    if (rank == 0) hash = s["params_sha256"];
    CHECK(s["params_sha256"] == hash);
  }
}

}  // namespace dtrain::integration
