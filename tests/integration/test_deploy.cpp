// The deployment files in deploy/ without a cluster (test_slurm's second test runs
// the batch script under a real Slurm):
//  - deploy/kubernetes: tests/python/check_kubernetes_deploy.py (/usr/bin/python3 with
//    PyYAML, Debian's python3-yaml: a test dependency, scripts/install-deps.sh; without
//    it this test FAILs) reads the manifests and runs the real dtrain with exactly the
//    environment each pod of the Indexed Job and of the TFJob would get, checking the
//    task and cluster dtrain resolves; then manifests broken on purpose (a subdomain
//    that is not the Service, a replica count that is not the Job's, a TFJob container
//    the operator would not give TF_CONFIG) must be caught.
//  - deploy/slurm/dtrain.sbatch: bash -n, its #SBATCH lines, and a run outside Slurm
//    with a stand-in `srun` on PATH that records its arguments and environment: the
//    job secret reaches the tasks in their environment and never on a command line,
//    and the job file and extra options reach `dtrain run`.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

using namespace dtrain::integration;
namespace fs = std::filesystem;

namespace {

constexpr const char* kPython = "/usr/bin/python3";

const std::string kDeploy = std::string(DTRAIN_SOURCE_DIR) + "/deploy";
const std::string kChecker = std::string(DTRAIN_SOURCE_DIR) + "/tests/python/check_kubernetes_deploy.py";

RunOutput check_manifests(const std::string& dir) {
  return run_program(kPython, {kChecker, dtrain_binary(), dir}, {150.0, ""});
}

// A copy of deploy/kubernetes in `dir`/name with `from` (which must occur exactly once
// in `file`) replaced by `to`.
std::string broken_copy(const TempDir& dir, const std::string& name, const std::string& file, const std::string& from,
                        const std::string& to) {
  const fs::path copy = dir.file(name);
  fs::copy(kDeploy + "/kubernetes", copy, fs::copy_options::recursive);
  std::string text = read_file((copy / file).string());
  const size_t at = text.find(from);
  INFO(file << " must hold '" << from << "' exactly once");
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(from, at + 1) == std::string::npos);
  text.replace(at, from.size(), to);
  dtrain::test::spit((copy / file).string(), text);
  return copy.string();
}

}  // namespace

TEST_CASE("deploy/kubernetes: each pod of the Indexed Job and of the TFJob resolves its own task and the cluster") {
  INFO("tests/python/check_kubernetes_deploy.py needs /usr/bin/python3 and PyYAML: run scripts/install-deps.sh");
  REQUIRE(fs::exists(kPython));
  const RunOutput yaml = run_program(kPython, {"-c", "import yaml"});
  INFO(describe(yaml));
  REQUIRE(yaml.exit_code == 0);

  const RunOutput r = check_manifests(kDeploy + "/kubernetes");
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  // Three pods, each its own worker, at the Service's DNS names; the TFJob's two.
  for (int i = 0; i < 3; ++i)
    CHECK_THAT(r.out, Catch::Contains("pod dtrain-mlp-" + std::to_string(i) + ": worker:" + std::to_string(i) +
                                      " of ['dtrain-mlp-0.dtrain-workers:8888', 'dtrain-mlp-1.dtrain-workers:8888', "
                                      "'dtrain-mlp-2.dtrain-workers:8888'] (source kubernetes"));
  CHECK_THAT(r.out, Catch::Contains("3 tasks train it to one params_sha256"));
  CHECK_THAT(r.out, Catch::Contains("a pod stops at once (exit 2)"));
  CHECK_THAT(r.out, Catch::Contains("TFJob dtrain-tfjob-worker-1: worker:1 of {'worker': "
                                    "['dtrain-tfjob-worker-0.default.svc:2222', 'dtrain-tfjob-worker-1.default.svc:2222']}"));

  // And the check does catch manifests that would not work.
  TempDir dir;
  struct Broken {
    std::string file, from, to, says;
  };
  const std::vector<Broken> cases = {
      {"dtrain-indexed-job.yaml", "subdomain: dtrain-workers", "subdomain: dtrain-other",
       "subdomain 'dtrain-other' is not the Service 'dtrain-workers'"},
      {"dtrain-indexed-job.yaml", "- name: DTRAIN_KUBERNETES_REPLICAS\n              value: \"3\"",
       "- name: DTRAIN_KUBERNETES_REPLICAS\n              value: \"2\"", "DTRAIN_KUBERNETES_REPLICAS '2' != completions 3"},
      {"dtrain-indexed-job.yaml", "mountPath: /etc/dtrain\n", "mountPath: /etc/secrets\n",
       "/etc/dtrain/secret is on no mounted volume"},
      {"tfjob.yaml", "- name: tensorflow", "- name: dtrain", "no container named 'tensorflow'"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Broken& b = cases[i];
    INFO(b.file << ": '" << b.from << "' -> '" << b.to << "'");
    const RunOutput bad = check_manifests(broken_copy(dir, "broken-" + std::to_string(i), b.file, b.from, b.to));
    INFO(describe(bad));
    CHECK(bad.exit_code == 1);
    CHECK_THAT(bad.err, Catch::Contains("FAIL: ") && Catch::Contains(b.says));
  }
}

TEST_CASE("deploy/slurm/dtrain.sbatch: #SBATCH lines, the secret in the tasks' environment only, arguments passed on") {
  const std::string script = kDeploy + "/slurm/dtrain.sbatch";
  REQUIRE(fs::exists(script));
  const RunOutput syntax = run_program("/bin/bash", {"-n", script});
  INFO(describe(syntax));
  REQUIRE(syntax.exit_code == 0);

  // sbatch reads #SBATCH lines up to the first command.
  const std::string text = read_file(script);
  const std::string head = text.substr(0, text.find("\nset -euo pipefail"));
  for (const char* option : {"--nodes=", "--ntasks-per-node=", "--time=", "--output="})
    CHECK_THAT(head, Catch::Contains(std::string("\n#SBATCH ") + option));

  // Outside Slurm, with a stand-in srun that records what it was given.
  TempDir dir;
  fs::create_directories(dir.file("bin"));
  const std::string srun = dir.write("bin/srun",
                                     "#!/bin/sh\n"
                                     "printf '%s\\n' \"$@\" > \"$RECORD/argv\"\n"
                                     "printf '%s' \"$DTRAIN_JOB_SECRET\" > \"$RECORD/secret\"\n"
                                     "printf '%s' \"$SUMMARY_DIR\" > \"$RECORD/summary_dir\"\n");
  const std::string fake_dtrain = dir.write("bin/fake-dtrain", "#!/bin/sh\necho 'dtrain 0.0.0-fake'\n");
  ::chmod(srun.c_str(), 0755);
  ::chmod(fake_dtrain.c_str(), 0755);
  dir.write("job.json", "{}");
  const std::string path = "PATH=" + dir.file("bin") + ":/usr/bin:/bin";

  // No config: the usage, exit 2, before anything else.
  const RunOutput usage = run_program("/usr/bin/env", {"-i", path, "/bin/bash", script}, {30.0, dir.path()});
  INFO(describe(usage));
  CHECK(usage.exit_code == 2);
  CHECK_THAT(usage.err, Catch::Contains("usage: sbatch dtrain.sbatch JOB.json"));

  const RunOutput r = run_program("/usr/bin/env",
                                  {"-i", path, "RECORD=" + dir.path(), "DTRAIN=" + fake_dtrain, "SLURM_JOB_ID=7",
                                   "/bin/bash", script, "job.json", "--threads", "1", "--set", "train.epochs=2"},
                                  {30.0, dir.path()});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("dtrain 0.0.0-fake with job.json; secret: made for this job"));
  const std::string secret = read_file(dir.file("secret"));
  CHECK(std::regex_match(secret, std::regex("[0-9a-f]{64}")));
  const std::string argv = read_file(dir.file("argv"));
  CHECK(argv == "--kill-on-bad-exit=1\n" + fake_dtrain +
                    "\nrun\n--config\njob.json\n--set\nruntime.cluster_resolver=slurm\n--threads\n1\n--set\n"
                    "train.epochs=2\n");
  CHECK(argv.find(secret) == std::string::npos);
  CHECK_THAT(r.out + r.err, !Catch::Contains(secret));

  // SUMMARY_DIR: each task adds its own --summary (its SLURM_PROCID), in a shell of its own.
  const RunOutput s = run_program("/usr/bin/env",
                                  {"-i", path, "RECORD=" + dir.path(), "DTRAIN=" + fake_dtrain,
                                   "SUMMARY_DIR=" + dir.file("sums"), "DTRAIN_JOB_SECRET=given-secret", "/bin/bash",
                                   script, "job.json"},
                                  {30.0, dir.path()});
  INFO(describe(s));
  REQUIRE(s.exit_code == 0);
  CHECK_THAT(s.out, Catch::Contains("secret: DTRAIN_JOB_SECRET from the submitting environment"));
  CHECK(read_file(dir.file("secret")) == "given-secret");
  CHECK(read_file(dir.file("summary_dir")) == dir.file("sums"));
  CHECK(fs::is_directory(dir.file("sums")));
  CHECK_THAT(read_file(dir.file("argv")),
             Catch::StartsWith("--kill-on-bad-exit=1\nbash\n-c\nexec \"$@\" --summary "
                               "\"$SUMMARY_DIR/summary-$SLURM_PROCID.json\"\ndtrain-task\n" +
                               fake_dtrain + "\nrun\n--config\njob.json\n"));
}
