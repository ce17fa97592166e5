// dtrain under a real Slurm: `srun -N1 -n2` starts two `dtrain run` tasks of one
// multi_worker_mirrored job whose config has no cluster key, so each task must find
// the cluster and its own place in it from Slurm's variables (SLURM_PROCID,
// SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST, ...). Both tasks must end with exit 0,
// world_size 2 and the same parameters. Needs a Slurm that takes a 2-task step on
// this machine: scripts/slurm-local.sh starts a one-node one (scripts/test.sh runs
// it before ctest); without one the test says DTRAIN-SKIPPED (a skip in ctest).
// The second test submits the shipped batch script, deploy/slurm/dtrain.sbatch, with
// `sbatch --wait`, once with the secret it makes itself and once with a secret file
// it makes (0600) on "shared storage", and checks the same outcome.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"
#include "support/shell_quote.h"
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

// Both tasks' summaries (dir/<prefix>0.json, dir/<prefix>1.json) say world_size 2
// and the same params_sha256.
void check_two_summaries(const std::string& dir, const std::string& prefix) {
  std::string hash;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = dir + "/" + prefix + std::to_string(rank) + ".json";
    INFO("task " << rank << ": " << path);
    REQUIRE(std::filesystem::exists(path));
    const json s = read_json_file(path);
    CHECK(s["world_size"] == 2);
    REQUIRE(s["params_sha256"].is_string());
    if (rank == 0) hash = s["params_sha256"];
    CHECK(s["params_sha256"] == hash);
  }
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
                           test::shell_quote(dtrain_binary()) + " run --config " + test::shell_quote(config) +
                           " --threads 1 --summary " + test::shell_quote(dir.path()) + "/s-$SLURM_PROCID.json";
  RunSpec spec;
  spec.deadline_seconds = 200.0;
  spec.cwd = dir.path();
  const RunOutput r =
      run_program(find_on_path("srun"), {"-N1", "-n2", "--kill-on-bad-exit=1", "sh", "-c", task}, spec);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);

  check_two_summaries(dir.path(), "s-");
}

TEST_CASE("sbatch --wait deploy/slurm/dtrain.sbatch: the shipped batch script runs a 2-task job to the end",
          "[system][slurm]") {
  const std::string why = why_no_slurm();
  if (!why.empty()) {
    std::cout << "DTRAIN-SKIPPED: " << why << std::endl;
    return;
  }
  const std::string sbatch = find_on_path("sbatch");
  REQUIRE_FALSE(sbatch.empty());  // srun without sbatch: a broken Slurm install
  const std::string script = std::string(DTRAIN_SOURCE_DIR) + "/deploy/slurm/dtrain.sbatch";
  REQUIRE(std::filesystem::exists(script));

  TempDir dir;
  json job = small_mlp_job();
  job["strategy"] = {{"type", "multi_worker_mirrored"}};
  job["train"]["batch_size_per_replica"] = 16;
  job.erase("cluster");
  write_job(dir, job);  // dir/job.json, given to the script by its relative name

  // The script as a user submits it: `sbatch --wait -N1 --ntasks-per-node=2 dtrain.sbatch
  // job.json [dtrain run options]`, from the directory holding the job file, with DTRAIN
  // naming the binary. No job secret in the environment: the script makes one (first
  // run) or a 0600 file holding one (second run). --time bounds a job that outlives a
  // killed test (sbatch --wait going away does not cancel it).
  struct Variant {
    std::string name;
    std::vector<std::string> env;  // extra VAR=value for sbatch (and so the job)
    std::string secret_words;      // what the script's log says of the secret
  };
  const std::string secret_file = dir.file("shared/dtrain.secret");
  std::filesystem::create_directories(dir.file("shared"));
  const std::vector<Variant> variants = {
      {"secret made and exported by the script", {}, "secret: made for this job"},
      {"DTRAIN_SECRET_FILE made by the script", {"DTRAIN_SECRET_FILE=" + secret_file},
       "secret: " + secret_file + " (made now, mode 0600)"},
  };
  for (size_t v = 0; v < variants.size(); ++v) {
    const Variant& variant = variants[v];
    INFO("variant: " << variant.name);
    const std::string summaries = dir.file("summaries-" + std::to_string(v));
    std::vector<std::string> args = {"-u", "TF_CONFIG", "-u", "DTRAIN_LAUNCHED", "-u", "DTRAIN_JOB_ID",
                                     "-u", "DTRAIN_INJECT", "-u", "DTRAIN_LISTEN_FD", "-u", "DTRAIN_JOB_SECRET",
                                     "-u", "DTRAIN_SECRET_FILE", "DTRAIN=" + dtrain_binary(),
                                     "SUMMARY_DIR=" + summaries};
    args.insert(args.end(), variant.env.begin(), variant.env.end());
    for (const std::string& a : {sbatch, std::string("--wait"), std::string("-N1"), std::string("--ntasks-per-node=2"),
                                 std::string("--time=4"), script, std::string("job.json"), std::string("--threads"),
                                 std::string("1")})
      args.push_back(a);
    RunSpec spec;
    spec.deadline_seconds = 100.0;
    spec.cwd = dir.path();
    const RunOutput r = run_program("/usr/bin/env", args, spec);
    INFO(describe(r));

    // "Submitted batch job N"; the script's #SBATCH --output puts its log in dtrain-N.out.
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, std::regex("Submitted batch job ([0-9]+)")));
    const std::string job_id = m[1];
    const std::string log = test::slurp(dir.file("dtrain-" + job_id + ".out"));
    INFO("dtrain-" << job_id << ".out:\n" << log);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(log, Catch::Contains(variant.secret_words));
    // The tasks learnt their cluster from Slurm: the job id is slurm-<job>.<step>.
    CHECK_THAT(log, Catch::Contains("all 2 tasks joined and agree (job slurm-" + job_id + ".0"));
    CHECK_THAT(log, Catch::Contains("dtrain.sbatch: srun ended with exit 0"));
    check_two_summaries(summaries, "summary-");
  }
  // The secret file the script made: the secret alone, readable by its owner only.
  REQUIRE(std::filesystem::exists(secret_file));
  struct stat st {};
  REQUIRE(::stat(secret_file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(std::regex_match(test::slurp(secret_file), std::regex("[0-9a-f]{64}\n?")));
}

}  // namespace dtrain::integration
