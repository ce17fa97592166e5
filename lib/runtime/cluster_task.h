// ClusterTask: this process as one task of a multi-task job, everything between
// "the cluster says I am worker:1" and the trainer: join the job through the
// chief's rendezvous store and agree on it (rendezvous/cluster_session.h), arm the
// watchdog, build the communicators the strategy asks for (strategy/registry.h:
// Gloo over the training tasks for an all-reduce; NCCL for a GPU job's gradients), and turn a collective's view of
// a lost peer ("connection closed by peer") into the heartbeat's (which task, its
// address, its last step).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "job/job_config.h"
#include "core/error.h"
#include "rendezvous/cluster_session.h"
#include "runtime/environment.h"
#include "strategy/parallel/grid_groups.h"

namespace dtrain::runtime {

// The session spec of a training job: credentials from the environment and the
// job file, the config hash to agree on, the job's timeouts.
rendezvous::SessionSpec session_spec(const job::JobConfig& job, const config::ClusterConfig& cluster,
                                     const Environment& env);

// The session spec of one task of a `dtrain bench` over a cluster (`bench`:
// "bench allreduce"): no job file; the cluster from TF_CONFIG, the secret and job
// id from the environment (the launcher sets all three); the tasks agree on the
// benchmark's `parameters` instead of a config hash.
rendezvous::SessionSpec bench_session_spec(const std::string& bench, const std::string& parameters,
                                           const Environment& env);

class ClusterTask {
 public:
  // Joins the job; throws what the rendezvous throws (TimeoutError, ConfigError
  // for a disagreement or a bad secret, PeerLost).
  explicit ClusterTask(const rendezvous::SessionSpec& spec);
  ~ClusterTask();
  ClusterTask(const ClusterTask&) = delete;
  ClusterTask& operator=(const ClusterTask&) = delete;

  rendezvous::ClusterSession& session() { return session_; }
  const std::string& name() const { return name_; }  // "worker:1"

  // A communicator over the job's training tasks (chief + workers), keyed under
  // `prefix` in the job's store, with the collective deadline `timeout_seconds`,
  // as the plan's `group` says: Gloo's (its own algorithm, or its ring), or the
  // hierarchical one (shared memory within each machine, as the rendezvous
  // learned them, Gloo between one leader per machine; on a single machine only
  // shared memory is used). Gloo connects each task to the few peers its
  // collectives need (comm/gloo/gloo_pairs.h), or to every other with `full_mesh`.
  std::unique_ptr<comm::Communicator> connect_training_tasks(const std::string& prefix, double timeout_seconds,
                                                             plan::TasksGroup group, bool full_mesh = false);
  // The machine of each training rank (chief 0, then the workers), as each task
  // said at the rendezvous: the execution plan's input once the tasks met.
  std::vector<std::string> host_of_rank() const;

  // This task's groups in `grid` (the plan's), made once from `workers` (the
  // training tasks' group) under `prefix`: a data or tensor group lies on one
  // machine wherever every group of its axis does, and is then a shared-memory
  // group; the others (a pipeline's, whose stages send to each other, and groups
  // across machines) are Gloo sub-groups of `workers` (strategy/parallel/grid_groups.h).
  strategy::GridGroups connect_grid_groups(const strategy::ParallelGrid& grid, comm::Communicator& workers,
                                           const std::string& prefix, double timeout_seconds);

  // strategy.elastic: the training tasks the communicators connect from now on,
  // by cluster rank (ascending; this task among them). Until set: all of them.
  // `generation`: the membership generation they are (ClusterSession::
  // membership_generation); a later one makes the groups' waits give up.
  void set_members(std::vector<int> ranks, int64_t generation) {
    members_ = std::move(ranks);
    membership_seen_ = generation;
  }
  const std::vector<int>& members() const { return members_; }
  // This task's rank among the members, and how many they are.
  int member_rank() const;
  int member_count() const;

  // The training tasks' NCCL group for the gradients of a GPU job (one GPU per
  // task: `device`), keyed under `prefix`, whose waits give up on a lost peer as
  // soon as the heartbeats know of it and otherwise after `timeout_seconds`;
  // ordered after the ops of the device's compute stream. Nullptr for a job of one
  // training task. A ConfigError in a build without NCCL.
  std::unique_ptr<comm::Communicator> connect_nccl(const std::string& prefix, double timeout_seconds,
                                                   const Device& device);
  // A two-task NCCL group under `prefix` (a pipeline's neighbouring stages, one
  // direction): this task is `rank` 0 or 1 in it; otherwise as connect_nccl.
  std::unique_ptr<comm::Communicator> connect_nccl_pair(const std::string& prefix, double timeout_seconds,
                                                        const Device& device, int rank);

  // A PeerLost, TimeoutError or CommError that a collective raised: the job's
  // failure as the heartbeats know it (naming the lost task, its address and last
  // step), waiting briefly for them to learn it, with the collective's own words
  // after it; the error itself when the heartbeats know of no failure.
  [[noreturn]] void rethrow_collective_failure(const Error& error);

  // Before this process ends on a fault of its own (a library thread's
  // exception): asks every task for a hang report saying `reason`, and waits
  // long enough for the chief to print it (report_round_seconds()).
  void report_before_exit(const std::string& reason);

 private:
  // Two heartbeat intervals and a second: the time for every task to hear of a
  // lost task, or to answer a report request and the chief to print it.
  double report_round_seconds() const { return 2.0 * heartbeat_interval_ + 1.0; }

  std::string name_;
  std::string job_id_;
  double heartbeat_interval_;
  rendezvous::ClusterSession session_;
  std::vector<int> members_;  // empty: every training task
  int64_t membership_seen_ = 0;
  // What a group's wait asks between polls: the job's failure, or (elastic) a
  // newer membership than the groups were made for; nullopt: wait on.
  std::optional<std::string> peer_lost_now();
  // The machine of each member (host_of_rank of the members, in member order).
  std::vector<std::string> member_hosts() const;
  // A shared-memory group under `prefix` of the job's store: this task `rank` of `size`.
  std::unique_ptr<comm::Communicator> connect_shared_memory(const std::string& prefix, double timeout_seconds,
                                                            int rank, int size);
};

}  // namespace dtrain::runtime
