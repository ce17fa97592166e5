// Implementation of cluster_plan.h.
//
// resolve_cluster() reads the job file's cluster and TF_CONFIG by TF's rules, but it
// answers for one process and so also wants that process's task. A launcher has
// none: when the sources name no task, it asks again with a task every valid cluster
// has (worker:0, else chief:0), and reports the first answer's error if neither helps.
#include "launch/cluster_plan.h"

#include <cctype>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"

namespace dtrain::launch {
namespace {

// How to run a job larger than one launcher starts.
constexpr const char* kBeyondLaunch =
    " (start a larger job's tasks with Slurm, Kubernetes or by hand: each runs `dtrain run` with its TF_CONFIG)";

// The cluster of the job file or TF_CONFIG (empty when neither has one).
config::ClusterConfig cluster_from_sources(const config::FileCluster& job, const char* tf_config) {
  try {
    return config::resolve_cluster(job, tf_config, "");
  } catch (const ConfigError&) {
    for (const char* task : {"worker:0", "chief:0"}) {
      try {
        return config::resolve_cluster(job, tf_config, task);
      } catch (const ConfigError&) {
      }
    }
    throw;  // the error of the first attempt: the real problem
  }
}

config::ClusterSpec requested_spec(const ClusterRequest& r) {
  if (r.workers < 0 || r.ps < 0) throw ConfigError("--workers and --ps cannot be negative");
  if (r.workers == 0 && !r.chief)
    throw ConfigError(str("a cluster needs a chief or at least one worker: add --workers N",
                          r.ps > 0 ? " (the ps tasks serve the workers)" : ""));
  if (const int64_t n = int64_t{r.workers} + r.ps + (r.chief ? 1 : 0) + (r.evaluator ? 1 : 0); n > kMaxLaunchTasks)
    throw ConfigError(str("--workers, --ps, --chief and --evaluator ask for ", n, " tasks; dtrain launch starts at most ",
                          kMaxLaunchTasks, kBeyondLaunch));
  config::ClusterSpec spec;
  auto add = [&spec](const std::string& type, int n) {
    if (n > 0) spec.tasks[type] = std::vector<std::string>(static_cast<size_t>(n));
  };
  add("chief", r.chief ? 1 : 0);
  add("worker", r.workers);
  add("ps", r.ps);
  add("evaluator", r.evaluator ? 1 : 0);
  return spec;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += str("\\u00", "0123456789abcdef"[(c >> 4) & 0xf], "0123456789abcdef"[c & 0xf]);
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string task_list(const config::ClusterSpec& spec) {
  std::vector<std::string> names;
  for (const auto& t : spec.all_tasks()) names.push_back(t.str());
  return join(names, ", ");
}

}  // namespace

ClusterPlan plan_cluster(const config::FileCluster& job, const ClusterRequest& request,
                         const char* tf_config) {
  ClusterPlan plan;
  if (request.any()) {
    if (!job.cluster.empty())
      throw ConfigError(str(job.source, " has a cluster (tasks ", task_list(job.cluster),
                            "), and --workers/--ps/--chief/--evaluator ask for another; "
                            "drop the options to launch the file's cluster, or remove "
                            "\"cluster\" from the file"));
    if (tf_config && *tf_config)
      log::warn("launch: ignoring TF_CONFIG from the environment: --workers builds the cluster");
    plan.spec = requested_spec(request);
    plan.source = "--workers";
    for (const config::TaskId& task : plan.spec.all_tasks()) {
      PlannedTask p{task, reserve_free_port()};
      plan.spec.tasks[task.type][static_cast<size_t>(task.index)] = p.port.address;
      plan.tasks.push_back(std::move(p));
    }
    return plan;
  }

  const config::ClusterConfig found = cluster_from_sources(job, tf_config);
  if (found.spec.empty())
    throw ConfigError(
        str("dtrain launch needs a cluster: give --workers N (and optionally --ps M, "
            "--chief, --evaluator) for one on free local ports, or a \"cluster\" in ",
            job.source, " or in TF_CONFIG"));
  plan.spec = found.spec;
  plan.source = found.source;
  if (const size_t n = plan.spec.all_tasks().size(); n > static_cast<size_t>(kMaxLaunchTasks))
    throw ConfigError(str("the cluster of ", plan.source, " has ", n, " tasks; dtrain launch starts at most ",
                          kMaxLaunchTasks, kBeyondLaunch));
  // Check every address before binding any, so the message is about the real problem.
  for (const config::TaskId& task : plan.spec.all_tasks()) {
    const std::string& address = plan.spec.address(task);
    const config::HostPort hp = config::parse_host_port(address, task.str());
    if (!is_loopback_host(hp.host))
      throw ConfigError(str(task.str(), "'s address '", address, "' (cluster from ", plan.source,
                            ") is not local: dtrain launch runs every task on this machine, so use "
                            "127.0.0.1, localhost or [::1] addresses (or run `dtrain run` on each "
                            "host of a real cluster)"));
  }
  for (const config::TaskId& task : plan.spec.all_tasks()) {
    const std::string& address = plan.spec.address(task);
    const config::HostPort hp = config::parse_host_port(address, task.str());
    plan.tasks.push_back({task, reserve_port(address, hp.host, hp.port, task.str())});
  }
  return plan;
}

std::vector<Injection> parse_injections(const std::vector<std::string>& values,
                                        const config::ClusterSpec& cluster) {
  std::vector<Injection> out;
  for (const std::string& value : values) {
    const std::string where = str("--inject '", value, "': ");
    const std::string usage =
        "expected kill:TYPE:INDEX@step=N, kill:TYPE:INDEX@ckpt_byte=N, kill:TYPE:INDEX@seconds=S or "
        "stall_reader:TYPE:INDEX@step=N, skip_allreduce:TYPE:INDEX@step=N or bytes_per_pack:TYPE:INDEX@bytes=N, "
        "e.g. --inject kill:worker:1@step=20";
    const size_t at = value.find('@');
    const std::string what = value.substr(0, at);
    const std::string when = at == std::string::npos ? "" : value.substr(at + 1);
    // kill: SIGKILL; stall_reader: the task's data reader blocks at that step (a hang, for hang reports).
    const std::string fault = what.substr(0, what.find(':'));
    if (fault != "kill" && fault != "stall_reader" && fault != "skip_allreduce" && fault != "bytes_per_pack")
      throw ConfigError(where + str("unknown fault '", fault,
                                    "' (the faults are kill, stall_reader, skip_allreduce and bytes_per_pack); ", usage));
    const std::string task_text = what.substr(fault.size() + 1 > what.size() ? what.size() : fault.size() + 1);
    const size_t colon = task_text.find(':');
    if (colon == std::string::npos || !all_digits(task_text.substr(colon + 1)) ||
        task_text.size() - colon > 10)
      throw ConfigError(where + str("'", task_text, "' is not a task TYPE:INDEX; ", usage));
    const config::TaskId task{task_text.substr(0, colon), std::stoi(task_text.substr(colon + 1))};
    if (!cluster.contains(task))
      throw ConfigError(where + str(task.str(), " is not a task of this cluster (its tasks: ",
                                    task_list(cluster), ")"));
    // step=N: at step N; ckpt_byte=N: once N bytes of checkpoint files are written;
    // seconds=S: S seconds after the task started (any task type).
    const std::string key = when.substr(0, when.find('=') == std::string::npos ? 0 : when.find('=') + 1);
    const std::string number = when.substr(key.size());
    const bool allowed = fault == "bytes_per_pack" ? key == "bytes="
                                                   : key == "step=" || (fault == "kill" && (key == "ckpt_byte=" || key == "seconds="));
    if (!allowed || !all_digits(number) || number.empty() || number.size() > 15)
      throw ConfigError(where + str("'", when, "' is not step=N (a step number), ckpt_byte=N (a byte count) or "
                                    "seconds=S; ", usage));
    for (const Injection& other : out)
      if (other.task == task)
        throw ConfigError(where + str(task.str(), " already has a fault (", other.value,
                                      "); give one --inject per task"));
    // (DTRAIN_INJECT: "kill@step=20", "bytes_per_pack=65536")
    out.push_back({task, fault == "bytes_per_pack" ? str("bytes_per_pack=", std::stoll(number))
                                                   : str(fault, "@", key, std::stoll(number))});
  }
  return out;
}

std::string tf_config_json(const config::ClusterSpec& spec, const config::TaskId& task) {
  std::string cluster;
  for (const auto& [type, addresses] : spec.tasks) {
    std::vector<std::string> quoted;
    for (const std::string& a : addresses) quoted.push_back(json_string(a));
    cluster += str(cluster.empty() ? "" : ", ", json_string(type), ": [", join(quoted, ", "), "]");
  }
  return str("{\"cluster\": {", cluster, "}, \"task\": {\"type\": ", json_string(task.type),
             ", \"index\": ", task.index, "}}");
}

}  // namespace dtrain::launch
