// Implementation of cluster_resolver.h.
#include "config/cluster_resolver.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"
#include "config/kubernetes.h"
#include "config/slurm.h"

namespace dtrain::config {
namespace {

bool has(const EnvVars& vars, const char* name) {
  const auto it = vars.find(name);
  return it != vars.end() && !it->second.empty();
}

const char* variable_or_null(const EnvVars& vars, const char* name) {
  const auto it = vars.find(name);
  return it == vars.end() ? nullptr : it->second.c_str();
}

ClusterConfig resolve_tf_config(const FileCluster& file, const EnvVars& vars, const std::string& task_flag) {
  return resolve_cluster(file, variable_or_null(vars, "TF_CONFIG"), task_flag);
}

ClusterConfig resolve_slurm_job(const RuntimeSpec& runtime, const EnvVars& vars) {
  SlurmOptions options;
  options.port_base = static_cast<int>(runtime.port_base);
  options.jobs = runtime.slurm_jobs;
  return resolve_slurm(vars, options);
}

[[noreturn]] void env_not_built() {
  throw ConfigError(
      "runtime.cluster_resolver env: PyTorch's env:// convention (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK) is "
      "not in this version of dtrain yet; give the cluster as TF_CONFIG (or run under Slurm or an Indexed Job), "
      "or unset WORLD_SIZE to run one process");
}

// The other resolvers' choices must not come with a cluster of TF's kind as well:
// which one would be meant is not clear.
void check_no_tf_cluster(const std::string& resolver, const FileCluster& file, const std::string& task_flag) {
  if (!task_flag.empty())
    throw ConfigError(str("--task ", task_flag, ": runtime.cluster_resolver is ", resolver,
                          ", which gives the task itself; drop --task or use cluster_resolver tf_config"));
  if (!file.cluster.empty())
    throw ConfigError(str(file.source, ": cluster: runtime.cluster_resolver is ", resolver,
                          ", which builds the cluster itself; remove \"cluster\" or use cluster_resolver tf_config"));
}

}  // namespace

std::string cluster_config_json(const ClusterConfig& c) {
  nlohmann::ordered_json j;
  j["cluster"] = nlohmann::ordered_json::object();
  for (const config::TaskId& t : c.spec.all_tasks()) j["cluster"][t.type].push_back(c.spec.address(t));
  j["task"] = c.single_process() ? nlohmann::ordered_json() : nlohmann::ordered_json{{"type", c.task.type}, {"index", c.task.index}};
  j["source"] = c.single_process() ? std::string("local") : c.source;
  j["job_id"] = c.job_id.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(c.job_id);
  j["local_rank"] = c.local_rank ? nlohmann::ordered_json(*c.local_rank) : nlohmann::ordered_json();
  return j.dump();
}

bool is_cluster_variable(const std::string& name) {
  static const std::vector<std::string> exact = {"TF_CONFIG", "JOB_COMPLETION_INDEX", "HOSTNAME", "MASTER_ADDR",
                                                 "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK"};
  for (const std::string& e : exact)
    if (name == e) return true;
  return name.rfind("SLURM_", 0) == 0 || name.rfind("SLURMD_", 0) == 0 || name.rfind("DTRAIN_KUBERNETES_", 0) == 0;
}

ClusterConfig resolve_job_cluster(const FileCluster& file, const RuntimeSpec& runtime, const EnvVars& vars,
                                  const std::string& task_flag) {
  const std::string& resolver = runtime.cluster_resolver;
  if (resolver == "tf_config") return resolve_tf_config(file, vars, task_flag);
  if (resolver == "slurm" || resolver == "kubernetes" || resolver == "env") {
    check_no_tf_cluster(resolver, file, task_flag);
    if (resolver == "slurm") return resolve_slurm_job(runtime, vars);
    if (resolver == "kubernetes") return resolve_kubernetes(vars, runtime.kubernetes);
    env_not_built();
  }
  // auto: TF's way first, as given by hand it says the most.
  if (!task_flag.empty() || !file.cluster.empty() || file.task || has(vars, "TF_CONFIG"))
    return resolve_tf_config(file, vars, task_flag);
  if (has(vars, "SLURM_PROCID") && has(vars, "SLURM_STEP_NODELIST")) return resolve_slurm_job(runtime, vars);
  if (has(vars, "JOB_COMPLETION_INDEX")) return resolve_kubernetes(vars, runtime.kubernetes);
  if (has(vars, "MASTER_ADDR") && has(vars, "WORLD_SIZE") && has(vars, "RANK")) {
    // One process of one (torchrun --nproc-per-node 1 on one node) needs no cluster.
    if (vars.at("WORLD_SIZE") == "1") return ClusterConfig{};
    env_not_built();
  }
  return ClusterConfig{};
}

}  // namespace dtrain::config
