// What `dtrain launch` will start: the cluster, each task's reserved port, the fault
// injections, and each task's TF_CONFIG.
//
// The cluster is one that the launcher builds on free loopback ports (--workers N
// [--ps M] [--chief] [--evaluator]), or the one the job file's `cluster` key or the
// launcher's TF_CONFIG gives (read and checked by TF's rules in lib/config). Every
// address must be local; every port is reserved before any task starts.
#pragma once

#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "launch/ports.h"

namespace dtrain::launch {

// The most tasks one `dtrain launch` starts (four descriptors each in the
// launcher, local or an ssh to another host).
inline constexpr int kMaxLaunchTasks = 256;

// --workers/--ps/--chief/--evaluator.
struct ClusterRequest {
  int workers = 0;
  int ps = 0;
  bool chief = false;
  bool evaluator = false;
  bool any() const { return workers > 0 || ps > 0 || chief || evaluator; }
};

struct PlannedTask {
  config::TaskId task;
  ReservedPort port;  // the address the task has in the cluster, held by the launcher
};

struct ClusterPlan {
  config::ClusterSpec spec;        // the addresses every task is given
  std::string source;              // "--workers", the job file, or "TF_CONFIG"
  std::vector<PlannedTask> tasks;  // in spec.all_tasks() order
};

// Builds the cluster and reserves its ports. `tf_config`: the launcher's TF_CONFIG
// (nullptr when unset); `file`: the job file's cluster keys. Throws ConfigError for a missing cluster, a request next to
// a cluster in the job file, an address that is not local, a port in use.
ClusterPlan plan_cluster(const config::FileCluster& file, const ClusterRequest& request,
                         const char* tf_config);

// One --inject value: kill:TYPE:INDEX@step=N or kill:TYPE:INDEX@ckpt_byte=N.
struct Injection {
  config::TaskId task;
  std::string value;  // what the task gets as DTRAIN_INJECT: "kill@step=N" or "kill@ckpt_byte=N"
};

// Parses --inject values; throws ConfigError for bad syntax, a task that is not in
// `cluster`, or two injections for one task.
std::vector<Injection> parse_injections(const std::vector<std::string>& values,
                                        const config::ClusterSpec& cluster);

// TF_CONFIG for `task`: {"cluster": {...}, "task": {"type": ..., "index": ...}}.
std::string tf_config_json(const config::ClusterSpec& spec, const config::TaskId& task);

}  // namespace dtrain::launch
