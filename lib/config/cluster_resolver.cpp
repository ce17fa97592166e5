// Implementation of cluster_resolver.h.
#include "config/cluster_resolver.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/strings.h"
#include "config/kubernetes.h"
#include "config/slurm.h"
#include "config/variables.h"

namespace dtrain::config {
namespace {

ClusterConfig resolve_tf_config(const FileCluster& file, const EnvVars& vars, const std::string& task_flag) {
  const auto it = vars.find("TF_CONFIG");  // set but empty is TF_CONFIG's own error
  return resolve_cluster(file, it == vars.end() ? nullptr : it->second.c_str(), task_flag);
}

ClusterConfig resolve_slurm_job(const RuntimeSpec& runtime, const EnvVars& vars) {
  SlurmOptions options;
  options.port_base = static_cast<int>(runtime.port_base);
  options.jobs = runtime.slurm_jobs;
  return resolve_slurm(vars, options);
}

const std::string& env_variable(const EnvVars& vars, const char* name) {
  const std::string* value = find_variable(vars, name);
  if (!value)
    throw ConfigError(str(name, " is not set: PyTorch's env:// convention needs MASTER_ADDR, MASTER_PORT, WORLD_SIZE "
                                "and RANK (torchrun and Kubeflow's PyTorchJob set them), or choose another "
                                "runtime.cluster_resolver"));
  return *value;
}

// PyTorch's env:// convention: WORLD_SIZE workers, RANK 0 the chief at
// MASTER_ADDR:MASTER_PORT; the others' addresses register at start.
ClusterConfig resolve_env(const EnvVars& vars) {
  const std::string& master = env_variable(vars, "MASTER_ADDR");
  const int port = variable_number("MASTER_PORT", env_variable(vars, "MASTER_PORT"));
  const int world = variable_number("WORLD_SIZE", env_variable(vars, "WORLD_SIZE"));
  const int rank = variable_number("RANK", env_variable(vars, "RANK"));
  if (port < 1 || port > 65535)
    throw ConfigError(str("MASTER_PORT='", port, "': a port must be in 1..65535"));
  if (world < 1) throw ConfigError("WORLD_SIZE='0': a job needs at least one task");
  if (rank >= world)
    throw ConfigError(str("RANK='", rank, "' is not below WORLD_SIZE='", world, "': ranks are 0..", world - 1));
  ClusterConfig c;
  c.source = "env";
  c.task = {"worker", rank};
  c.spec.tasks["worker"].assign(static_cast<size_t>(world), "");
  // Checked as TF_CONFIG's addresses are (an IPv6 host needs brackets).
  const std::string chief = str(master.find(':') != std::string::npos && master.front() != '[' ? "[" + master + "]" : master,
                                ":", port);
  parse_host_port(chief, "MASTER_ADDR:MASTER_PORT");
  c.spec.tasks["worker"][0] = chief;
  c.registers_addresses = world > 1;
  c.job_id = str("env-", master, "-", port);
  for (char& ch : c.job_id)
    if (std::isalnum(static_cast<unsigned char>(ch)) == 0 && ch != '-' && ch != '.') ch = '-';
  if (const std::string* local = find_variable(vars, "LOCAL_RANK")) c.local_rank = variable_number("LOCAL_RANK", *local);
  if (world == 1) return ClusterConfig{};  // one process of one: nothing to meet
  return c;
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
  for (const config::TaskId& t : c.spec.all_tasks()) {
    const std::string& address = c.spec.address(t);  // "" until an env:// task registers it
    j["cluster"][t.type].push_back(address.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(address));
  }
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
    return resolve_env(vars);
  }
  // auto: TF's way first, as given by hand it says the most.
  if (!task_flag.empty() || !file.cluster.empty() || file.task || find_variable(vars, "TF_CONFIG"))
    return resolve_tf_config(file, vars, task_flag);
  if (find_variable(vars, "SLURM_PROCID") && find_variable(vars, "SLURM_STEP_NODELIST")) return resolve_slurm_job(runtime, vars);
  if (find_variable(vars, "JOB_COMPLETION_INDEX")) return resolve_kubernetes(vars, runtime.kubernetes);
  if (find_variable(vars, "MASTER_ADDR") && find_variable(vars, "WORLD_SIZE") && find_variable(vars, "RANK")) return resolve_env(vars);
  return ClusterConfig{};
}

}  // namespace dtrain::config
