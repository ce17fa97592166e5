// The cluster a job runs on, by TensorFlow's TF_CONFIG rules.
//
// A cluster lists host:port addresses per task type (chief, worker, ps,
// evaluator); a task is one (type, index). The cluster comes from the job file's
// `cluster`/`task` keys or from the TF_CONFIG environment variable (same JSON
// shape); the task from --task TYPE:INDEX, else TF_CONFIG's `task`, else the
// file's. The chief is chief:0, or worker:0 when there is no chief. The training
// world (synchronous strategies) is the chief plus the workers; ps and evaluator
// tasks are outside it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::config {

// The four task types of TF_CONFIG, as a kind: code compares kinds, never names
// (the readers check the names; tests/unit/architecture keeps it so).
enum class TaskType { kChief, kWorker, kPs, kEvaluator };
// TF's name of a kind ("ps").
const char* task_type_name(TaskType type);
// The kind of a task type name the readers accepted (InternalError for another).
TaskType task_type_of(const std::string& name);

struct TaskId {
  std::string type;  // chief | worker | ps | evaluator (TF's name, as read)
  int index = 0;
  TaskType kind() const { return task_type_of(type); }
  bool is(TaskType t) const { return kind() == t; }
  std::string str() const { return type + ":" + std::to_string(index); }  // "worker:1"
  bool operator==(const TaskId& other) const = default;
};

struct ClusterSpec {
  // Task type -> addresses ("host:port"). Only the four known types appear.
  std::map<std::string, std::vector<std::string>> tasks;
  std::string rpc_layer;  // accepted for TF compatibility ("grpc"); not used

  bool empty() const { return tasks.empty(); }
  int count(const std::string& type) const;
  int count(TaskType type) const { return count(task_type_name(type)); }
  const std::string& address(const TaskId& task) const;  // task must exist
  bool contains(const TaskId& task) const;
  // Every task: chief first, then workers, ps, evaluator, each by index.
  std::vector<TaskId> all_tasks() const;
  // chief:0, or worker:0 when there is no chief.
  TaskId chief() const;
  // Tasks that train in lock-step: chiefs + workers.
  int world_size() const;
  // This task's rank in the training world (chief 0, then workers in order),
  // or -1 for ps and evaluator tasks.
  int rank(const TaskId& task) const;
};

// What this process is: the resolved cluster and its own task.
struct ClusterConfig {
  ClusterSpec spec;   // empty: a single process without a cluster
  TaskId task;        // meaningful only when !spec.empty()
  // Where the cluster came from, for messages and `dtrain cluster`: the job file's
  // name, "TF_CONFIG", "slurm", "kubernetes" or "env".
  std::string source;
  std::string job_id;  // a resolver's name for the job ("slurm-<job>.<step>"); "" = none
  // The task's index on its machine when the resolver knows it (SLURM_LOCALID,
  // LOCAL_RANK): picks its GPU when devices are auto.
  std::optional<int> local_rank;
  // env://: only the chief's address is known here; the other workers' addresses
  // are "" until each registers its own in the chief's store at start
  // (runtime/env_registration.h).
  bool registers_addresses = false;
  bool single_process() const { return spec.empty(); }
};

// Environment variables by name, as the runtime read them (lib/config never calls getenv).
using EnvVars = std::map<std::string, std::string>;

// The job file's own `cluster` and `task` keys (both may be absent), for
// resolve_cluster(); `source` names the file in messages.
struct FileCluster {
  std::string source;
  ClusterSpec cluster;
  std::optional<TaskId> task;
};

// Resolves this process's cluster and task by TF's rules: the cluster from the
// job file or TF_CONFIG (`tf_config`: the variable's value, or nullptr when unset;
// both given and different is an error showing both), the task from `task_flag`
// ("worker:1", "" = none), else TF_CONFIG's task, else the file's. Checks the spec:
// known task types only (suggesting the closest), at most one chief and one
// evaluator, host:port addresses, no duplicates, the task within its list.
// Throws ConfigError naming the JSON path (in TF_CONFIG or the file) and a fix.
ClusterConfig resolve_cluster(const FileCluster& file, const char* tf_config, const std::string& task_flag);

// Parses a "host:port" address; throws ConfigError (naming `where`) otherwise.
struct HostPort {
  std::string host;
  int port = 0;
};
HostPort parse_host_port(const std::string& address, const std::string& where);

// Parses "worker:1" (for --task); throws ConfigError otherwise.
TaskId parse_task_flag(const std::string& text);

}  // namespace dtrain::config
