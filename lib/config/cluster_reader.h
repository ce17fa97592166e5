// Reading the cluster keys of a job file or TF_CONFIG (private to lib/config/).
//
// The job file and TF_CONFIG share one shape ({"cluster": {type: ["host:port", ...]},
// "task": {"type": ..., "index": ...}, "rpc_layer": ...}), so both go through
// read_cluster_keys(), which checks everything a cluster alone can get wrong (task
// types, addresses, duplicates, one chief, one evaluator, a chief or a worker) and
// names the JSON path in the file ("job.json: cluster.worker[2]") or in the
// variable ("TF_CONFIG.cluster.worker[2]"). The plain helpers (type suggestions,
// host:port checks, task-in-cluster checks) live in cluster_spec.cpp and are shared
// with parse_task_flag() and resolve_cluster(). The job file's runtime section (the
// rendezvous and heartbeat settings) is read here too. This header includes nlohmann/json.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "config/job_file.h"
#include "config/json_reader.h"

namespace dtrain::config {

// The task types, in all_tasks() order.
inline const std::vector<std::string> kTaskTypes = {"chief", "worker", "ps", "evaluator"};

bool is_task_type(const std::string& type);

// "unknown task type 'workers'; did you mean 'worker'? (valid: chief, worker, ps,
// evaluator)", with a note on TF1's worker_hosts/ps_hosts names where it applies.
std::string unknown_task_type_message(const std::string& type);

// Why `address` is not host:port ("" when it is; then *out holds it, the host without
// IPv6 brackets).
std::string host_port_problem(const std::string& address, HostPort* out);

// An address for comparisons: lower-case host, port as a number ("[::1]:2222" stays
// bracketed). Equal for "Host1:02222" and "host1:2222".
std::string normalized_address(const HostPort& address);

// Why `task` is not a task of `spec` ("" when it is). `list_name(type)` names a list in
// the message: "TF_CONFIG.cluster.worker" or "cluster.worker in job.json".
std::string task_problem(const ClusterSpec& spec, const TaskId& task,
                         const std::function<std::string(const std::string&)>& list_name);

// How a cluster is shown in messages: {"chief": ["h0:2222"], "worker": ["h1:2222"]}.
std::string format_cluster(const ClusterSpec& spec);

// Reads the optional `cluster`, `task` and `rpc_layer` keys of `r` (a job file's top
// level or TF_CONFIG's): absent or null keys leave cluster empty / task unset. When
// both a cluster and a task are given, the task must be in the cluster.
// `ignored_task_keys` are accepted in the task object and ignored (TF_CONFIG's
// "trial" and "cloud" from Cloud ML Engine).
void read_cluster_keys(ObjectReader& r, ClusterSpec* cluster, std::optional<TaskId>* task,
                       const std::vector<std::string>& ignored_task_keys = {});

// Reads the job file's runtime section (threads, rendezvous_timeout, heartbeat_interval,
// heartbeat_timeout > heartbeat_interval, secret_file, job_id, memory_limit, the cluster
// resolvers' keys).
RuntimeSpec read_runtime(const Context& ctx, const Json& value);

}  // namespace dtrain::config
