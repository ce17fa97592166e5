// runtime.cluster_resolver (config/cluster_resolver.h): which resolver `auto`
// picks from the variables present, what an explicit choice refuses, and the
// runtime keys that configure them.
#include <catch2/catch.hpp>

#include <string>

#include "config/cluster_resolver.h"
#include "core/error.h"
#include "job/job_config.h"

namespace dtrain::config {
namespace {

using Catch::Matchers::Contains;

const EnvVars kSlurmStep = {{"SLURM_PROCID", "1"},           {"SLURM_LOCALID", "1"},
                            {"SLURM_STEP_NUM_TASKS", "2"},   {"SLURM_STEP_NODELIST", "vm"},
                            {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_JOB_ID", "41"},
                            {"SLURM_STEP_ID", "0"}};
const EnvVars kIndexedJob = {{"JOB_COMPLETION_INDEX", "1"}, {"HOSTNAME", "train-1"},
                             {"DTRAIN_KUBERNETES_REPLICAS", "3"}};
const char* kTfConfig = R"({"cluster": {"worker": ["h0:2222", "h1:2222"]}, "task": {"type": "worker", "index": 0}})";

// `a` with the variables of `b` set (over a's).
EnvVars merged(EnvVars a, const EnvVars& b) {
  for (const auto& [name, value] : b) a[name] = value;
  return a;
}

ClusterConfig resolve(const EnvVars& vars, const RuntimeSpec& runtime = {}, const std::string& task_flag = "",
                      const FileCluster& file = {"job.json", {}, {}}) {
  return resolve_job_cluster(file, runtime, vars, task_flag);
}

std::string error_of(const EnvVars& vars, const RuntimeSpec& runtime, const std::string& task_flag = "") {
  try {
    resolve(vars, runtime, task_flag);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError");
  return "";
}

}  // namespace

TEST_CASE("auto: no variables is one process alone", "[resolver]") {
  CHECK(resolve({}).single_process());
  CHECK(resolve({{"HOSTNAME", "laptop"}}).single_process());
  CHECK(cluster_config_json(resolve({})) ==
        R"({"cluster":{},"task":null,"source":"local","job_id":null,"local_rank":null})");
}

TEST_CASE("auto: inside a Slurm step the cluster comes from Slurm", "[resolver]") {
  const ClusterConfig c = resolve(kSlurmStep);
  CHECK(c.source == "slurm");
  CHECK(c.task == TaskId{"worker", 1});
  CHECK(c.spec.tasks.at("worker") == std::vector<std::string>{"vm:8888", "vm:8889"});
  CHECK(c.job_id == "slurm-41.0");
  CHECK(c.local_rank == 1);
  CHECK(cluster_config_json(c) ==
        R"({"cluster":{"worker":["vm:8888","vm:8889"]},"task":{"type":"worker","index":1},"source":"slurm",)"
        R"("job_id":"slurm-41.0","local_rank":1})");
  // runtime.port_base and runtime.slurm_jobs shape it.
  RuntimeSpec runtime;
  runtime.port_base = 9000;
  runtime.slurm_jobs = {{"ps", 1}, {"worker", 1}};
  const ClusterConfig ps = resolve(kSlurmStep, runtime);
  CHECK(ps.spec.tasks.at("ps") == std::vector<std::string>{"vm:9000"});
  CHECK(ps.spec.tasks.at("worker") == std::vector<std::string>{"vm:9001"});
  CHECK(ps.task == TaskId{"worker", 0});
}

TEST_CASE("auto: TF_CONFIG, --task and the file's cluster come before Slurm's variables", "[resolver]") {
  const ClusterConfig c = resolve(merged(kSlurmStep, {{"TF_CONFIG", kTfConfig}}));
  CHECK(c.source == "TF_CONFIG");
  CHECK(c.spec.tasks.at("worker")[1] == "h1:2222");
  ClusterSpec spec;
  spec.tasks["worker"] = {"a:1", "b:1"};
  const ClusterConfig file = resolve(kSlurmStep, {}, "worker:1", {"job.json", spec, {}});
  CHECK(file.source == "job.json");
  CHECK(file.task == TaskId{"worker", 1});
}

TEST_CASE("auto: an Indexed Job's index gives the Kubernetes cluster", "[resolver]") {
  const ClusterConfig c = resolve(kIndexedJob);
  CHECK(c.source == "kubernetes");
  CHECK(c.task == TaskId{"worker", 1});
  CHECK(c.spec.tasks.at("worker") ==
        std::vector<std::string>{"train-0.train:8888", "train-1.train:8888", "train-2.train:8888"});
  // Slurm first when both are there.
  CHECK(resolve(merged(kSlurmStep, kIndexedJob)).source == "slurm");
  // runtime.kubernetes sets what the variables would.
  RuntimeSpec runtime;
  runtime.kubernetes.service = "workers";
  runtime.kubernetes.port = 7000;
  CHECK(resolve(kIndexedJob, runtime).spec.address({"worker", 2}) == "train-2.workers:7000");
}

TEST_CASE("an explicit resolver is used even when TF_CONFIG is set, and refuses --task", "[resolver]") {
  RuntimeSpec runtime;
  runtime.cluster_resolver = "slurm";
  CHECK(resolve(merged(kSlurmStep, {{"TF_CONFIG", kTfConfig}}), runtime).source == "slurm");
  CHECK_THAT(error_of(kSlurmStep, runtime, "worker:0"), Contains("--task worker:0") && Contains("drop --task"));
  CHECK_THAT(error_of({}, runtime), Contains("SLURM_") && Contains("not set"));
  runtime.cluster_resolver = "tf_config";
  CHECK(resolve(kSlurmStep, runtime).single_process());  // Slurm's variables are not looked at
  runtime.cluster_resolver = "kubernetes";
  CHECK_THAT(error_of({}, runtime), Contains("JOB_COMPLETION_INDEX"));
}

TEST_CASE("env://: WORLD_SIZE workers, RANK 0 the chief at MASTER_ADDR:MASTER_PORT, the rest to register",
          "[resolver]") {
  const EnvVars torchrun = {{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}, {"WORLD_SIZE", "4"},
                            {"RANK", "2"}, {"LOCAL_RANK", "0"}};
  const ClusterConfig c = resolve(torchrun);
  CHECK(c.source == "env");
  CHECK(c.task == TaskId{"worker", 2});
  CHECK(c.spec.tasks.at("worker") == std::vector<std::string>{"10.0.0.1:29500", "", "", ""});
  CHECK(c.registers_addresses);
  CHECK(c.job_id == "env-10.0.0.1-29500");
  CHECK(c.local_rank == 0);
  CHECK(cluster_config_json(c) ==
        R"({"cluster":{"worker":["10.0.0.1:29500",null,null,null]},"task":{"type":"worker","index":2},)"
        R"("source":"env","job_id":"env-10.0.0.1-29500","local_rank":0})");
  CHECK(resolve(merged(torchrun, {{"WORLD_SIZE", "1"}, {"RANK", "0"}})).single_process());
  RuntimeSpec env;
  env.cluster_resolver = "env";
  CHECK_THAT(error_of(merged(torchrun, {{"RANK", "4"}}), env), Contains("RANK='4' is not below WORLD_SIZE='4'"));
  CHECK_THAT(error_of(merged(torchrun, {{"MASTER_PORT", "http"}}), env), Contains("MASTER_PORT='http'"));
  CHECK_THAT(error_of({{"MASTER_ADDR", "h"}}, env), Contains("MASTER_PORT is not set"));
}

TEST_CASE("the runtime section reads the resolver keys", "[resolver]") {
  const std::string base = R"({"model": {"input_shape": [4], "layers": [{"type": "Dense", "units": 2}]},
    "loss": {"type": "sparse_categorical_crossentropy"}, "optimizer": {"type": "sgd"},
    "data": {"train": {"format": "synthetic", "shape": [4], "count": 8, "classes": 2}}, "train": {},)";
  const job::JobConfig job = job::parse_job_config(
      base + R"("runtime": {"cluster_resolver": "slurm", "port_base": 7000, "slurm_jobs": {"worker": 3, "ps": 1},
                 "kubernetes": {"job": "j", "service": "s", "replicas": 4, "port": 7100}}})",
      "job.json");
  CHECK(job.runtime.cluster_resolver == "slurm");
  CHECK(job.runtime.port_base == 7000);
  // Types in name order, as TF's SlurmClusterResolver takes its `jobs`.
  CHECK(job.runtime.slurm_jobs == std::vector<std::pair<std::string, int>>{{"ps", 1}, {"worker", 3}});
  CHECK(job.runtime.kubernetes.job == "j");
  CHECK(job.runtime.kubernetes.replicas == 4);
  CHECK_THROWS_WITH(job::parse_job_config(base + R"("runtime": {"cluster_resolver": "slrum"}})", "job.json"),
                    Contains("runtime.cluster_resolver") && Contains("did you mean 'slurm'"));
  CHECK_THROWS_WITH(job::parse_job_config(base + R"("runtime": {"slurm_jobs": {"worker": 0}}})", "job.json"),
                    Contains("runtime.slurm_jobs.worker"));
}

}  // namespace dtrain::config
