// The task runtime's entry points: what `dtrain run`, `dtrain validate` and
// `dtrain bench allreduce` do once the command line is read. Each takes the job
// (or the benchmark's request) and the Environment; a process that is one task of
// a cluster joins it here (cluster_task.h), a single process trains directly.
#pragma once

#include <functional>
#include <string>

#include "job/job_config.h"
#include "runtime/environment.h"

namespace dtrain::runtime {

struct RunRequest {
  std::string summary_path;  // --summary FILE ("" = none)
  std::string task_flag;     // --task TYPE:INDEX ("" = from TF_CONFIG or the job file)
  // Polled before every step: the signal once the process was asked to stop
  // (SIGTERM, SIGINT), else 0. Its first call says the task now handles a stop
  // itself (at a step boundary; a ps task serves on): `dtrain run` ends a task
  // asked to stop before that at once.
  std::function<int()> stop_signal;
};

// Trains the job as this process's task (TF's rules pick the task): alone, or as
// one task of a cluster (join, agree, heartbeats, the communicator the strategy
// needs, the final barrier). DTRAIN_INJECT faults are armed first. Throws the
// job's errors (PeerLost naming a lost task, Preempted after SIGTERM, ...).
void run_job(const job::JobConfig& job, const Environment& env, const RunRequest& request);

// `dtrain validate`: the checks of trainer::validate_job, and for a task of a
// cluster that its own address can be bound. Prints what it checked, then the
// task's execution plan (what would run where, and why), or with `json` the plan
// as one JSON object on the last line.
void validate_task(const job::JobConfig& job, const Environment& env, const std::string& task_flag,
                   bool json = false);

// What a `dtrain bench` over a cluster measures (bench allreduce, bench ps): the
// same for every task of it.
struct ClusterBenchRequest {
  std::string sizes = "4K:64M";
  int iterations = 20;
  int warmup = 5;
  bool json = false;
  // bench allreduce: strategy.communication's choice ("auto", "ring", "hierarchical").
  std::string communication = "auto";
  // bench allreduce: Gloo's full mesh rather than the neighbours its collectives need.
  bool full_mesh = false;
  // "sizes=4K:64M iterations=20 warmup=5 communication=auto connections=neighbours":
  // what the tasks agree on.
  std::string parameters() const;
};

// Asks the running job `job_id` (its cluster and secret) for a hang report
// through the chief's store, from outside the job: `dtrain launch --hostfile`
// on SIGUSR1. Logs a warning when the chief cannot be reached; never throws.
void ask_chief_for_report(const config::ClusterSpec& cluster, const std::string& job_id, const std::string& secret);

// One task of `dtrain bench allreduce` (its cluster from TF_CONFIG, as the
// launcher sets it): join, connect the training tasks with Gloo, time every size;
// the chief prints an nccl-tests-style table (or one JSON object per size). Needs
// no job file: the tasks agree on the benchmark's own parameters.
void bench_allreduce_task(const ClusterBenchRequest& request, const Environment& env);
// `dtrain bench allreduce --device gpu`: NCCL over this machine's GPUs in this
// process (one thread per GPU; `gpus` of them, 0: all), printed as nccl-tests'
// table (or one JSON object per size). ConfigError saying why when no GPU is
// usable or the build has no NCCL; RuntimeError when a result was wrong.
void bench_allreduce_gpus(const ClusterBenchRequest& request, int gpus);
// Checks a --sizes list (ConfigError when malformed), before any task starts.
void check_size_list(const std::string& sizes);

// One task of `dtrain bench ps` (its cluster of workers and ps tasks from
// TF_CONFIG, as the launcher sets it): a ps serves each size, a worker times
// pulls and pushes (ps/bench_ps.h); worker 0 prints the nccl-tests-style table
// (or one JSON object per size).
void bench_ps_task(const ClusterBenchRequest& request, const Environment& env);

// `dtrain devices` and `dtrain version`: the usable GPUs as text or JSON (or why
// there are none), and the backends built in with their libraries' versions.
std::string devices_report(bool json);
std::string backends_description();
// The collectives' engines of this build: "Gloo (TCP), shared memory, NCCL 2.28.9"
// (or "NCCL: not in this build").
std::string collectives_description();

}  // namespace dtrain::runtime
