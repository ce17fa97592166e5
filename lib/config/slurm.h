// The Slurm cluster resolver: the cluster and this task from a Slurm step's variables.
//
// Follows TensorFlow's SlurmClusterResolver: the step's tasks are numbered by
// SLURM_PROCID and laid out in blocks over SLURM_STEP_NODELIST (srun's default
// distribution): the first node holds tasks 0..n0-1, the next the following n1, with
// n0, n1, ... from SLURM_STEP_TASKS_PER_NODE. The k-th task on a node listens on
// port_base + k. The first tasks (in SLURM_PROCID order) go to the first job of
// `jobs`, the next to the second, and so on; with no jobs every task is a worker and
// the chief is worker:0. Pure: the caller passes the variables it read
// (lib/config never calls getenv); errors are ConfigErrors naming the variable.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/cluster_spec.h"

namespace dtrain::config {

// Expands Slurm's compressed host list: "node[01-03,07],login" -> node01, node02,
// node03, node07, login. Zero padding is kept (the width of a range's first bound);
// several brackets in one name give every combination in order
// ("r[1-2]-n[1-2]" -> r1-n1, r1-n2, r2-n1, r2-n2); text may follow a bracket.
// Throws ConfigError naming `variable` and the text on bad syntax.
std::vector<std::string> expand_slurm_hostlist(const std::string& text, const std::string& variable);

// Expands Slurm's tasks-per-node counts: "2(x3),1" -> {2, 2, 2, 1}; "4" -> {4}.
// Throws ConfigError naming `variable` and the text on bad syntax.
std::vector<int> expand_slurm_tasks_per_node(const std::string& text, const std::string& variable);

struct SlurmOptions {
  int port_base = 8888;  // the first task on each node listens here, the next on +1, ...
  // Task type -> count, in order: the first tasks (by SLURM_PROCID) go to the first
  // type. Empty: every task is a worker.
  std::vector<std::pair<std::string, int>> jobs;
};

// Resolves the cluster and this task from a Slurm step's variables (SLURM_PROCID,
// SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE; SLURM_LOCALID,
// SLURMD_NODENAME, SLURM_JOB_ID and SLURM_STEP_ID when set). source = "slurm",
// job_id = "slurm-<job>.<step>", local_rank = the task's index on its node.
ClusterConfig resolve_slurm(const EnvVars& env, const SlurmOptions& options);

}  // namespace dtrain::config
