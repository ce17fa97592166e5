// The execution plan: what one task of a job runs, where, and connected how,
// decided once by one pure function of (job, cluster, this machine). The runtime
// connects exactly what the plan names and hands the strategy built objects; the
// trainer computes on the plan's devices with the plan's threads; `dtrain
// validate` prints the plan (--json too) before anything trains.
//
// Every choice the plan makes is also written down as a Decision (what, the
// choice, why), so "auto" is never a mystery: "training tasks: hierarchical
// (shared memory): auto: the 2 training tasks share one machine".
//
// A plan is made again when what it was made from changes: after the tasks meet
// (the rendezvous tells which machine each task is on, and how many share this
// one), after a pipeline's "auto" split is measured (with_stage_split), and, in
// a later issue, when the membership changes. changed_parts() names what differs,
// so only that is connected again.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "job/job_config.h"
#include "plan/machine.h"
#include "plan/plan_memory.h"
#include "strategy/sync/gradient_path.h"
#include "strategy/planning/memory_estimate.h"
#include "strategy/planning/parallel_grid.h"
#include "strategy/planning/pipeline_stages.h"
#include "strategy/registry.h"
#include "tensor/device.h"

namespace dtrain::plan {

// What this task does in the job.
enum class Role {
  kTrain,           // trains (alone, or as one of the training tasks, or as a parameter_server worker)
  kServeVariables,  // a ps task: serves its shards of the variables
  kEvaluate,        // the evaluator: evaluates the chief's checkpoints
  kWait,            // in the cluster but without work under this strategy: waits for the end
};

// How the job's training tasks are connected to each other (the strategy's
// `workers` group: the broadcast of the chief's parameters, metrics, checks,
// and the gradients where nothing faster is planned).
enum class TasksGroup {
  kNone,          // no group: one task trains, or parameter_server (workers talk to the ps tasks)
  kGloo,          // Gloo over TCP, Gloo's own all-reduce algorithm
  kGlooRing,      // Gloo over TCP, its ring by name (strategy.communication ring; a pipeline's groups)
  kHierarchical,  // shared memory among each machine's tasks, Gloo between one leader per machine
};

// Where this task's gradients are combined: the strategy module's rule
// (strategy/sync/gradient_path.h), which the plan applies and explains.
using strategy::Gradients;
using strategy::gradients_name;

// How a pipeline's stages send activations and their gradients to each other.
enum class Activations {
  kNone,  // not a pipeline
  kGloo,  // through the stages' Gloo group, with host copies on GPUs
  kNccl,  // NCCL between neighbouring stages' GPUs where every stage has a GPU of its own
          // (the stages compare their GPUs when they meet; Gloo otherwise)
};

// One choice of the plan, for people: "device", "cuda:1", "LOCAL_RANK 1 of 2 GPUs".
struct Decision {
  std::string what, choice, why;
  // A line the task logs when it carries the decision out ("" = none): "threads:
  // 1 per task (2 cores shared by the 2 tasks of this job on this host; ...)".
  std::string notice = {};
};

struct ExecutionPlan {
  const strategy::StrategyEntry* strategy = nullptr;
  std::string task;  // "worker:1"; "" for a process without a cluster
  std::string cluster_source;  // where the cluster came from ("TF_CONFIG", the job file, "slurm"); "" without one
  Role role = Role::kTrain;
  int rank = 0;            // among the training tasks (chief 0, then the workers); -1 outside them
  int training_tasks = 1;  // the tasks this task's strategy trains with in lock-step (1: alone)
  int machines = 1;        // machines the training tasks are on
  int tasks_on_host = 1;   // tasks of the job on this machine (they share its cores)
  bool met = false;        // made after the tasks met (machines known, not read from addresses)
  // The device of each replica of this task; replicas[0] is the task's device
  // (evaluation, the data's staging, the pipeline stage's).
  std::vector<Device> replicas = {Device::cpu()};
  int threads = 1;        // compute threads of this process
  int64_t prefetch = 0;   // batches the data pipeline reads ahead
  TasksGroup tasks = TasksGroup::kNone;
  Gradients gradients = Gradients::kNone;
  Activations activations = Activations::kNone;
  // A pipeline's stage split (this task's stage from rank); nullopt for other
  // strategies or without the tasks to cut over. measure_split: strategy.stages
  // "auto", to be measured when the tasks meet (with_stage_split then replaces it).
  std::optional<strategy::StageSplit> split;
  bool measure_split = false;
  // The training tasks as copies x stages x tensor parts, where they are a grid
  // (a pipeline, tensor_parallel): the runtime builds this task's groups in it
  // (strategy/parallel/grid_groups.h) before the strategy. nullopt otherwise.
  std::optional<strategy::ParallelGrid> grid;
  // This task's memory estimate, held against runtime.memory_limit before the
  // model is allocated (training tasks only).
  std::optional<TaskMemory> memory;
  // The strategy needs nothing from other tasks (one_device, mirrored,
  // central_storage): `dtrain validate` builds it to check its settings.
  bool builds_alone = false;
  std::vector<Decision> decisions;
  // DTRAIN_ALLOW_TF32 as the environment set it (nullopt: the backend's default).
  std::optional<bool> allow_tf32;

  const Device& device() const { return replicas.front(); }
  int local_replicas() const { return static_cast<int>(replicas.size()); }
  bool parameter_server() const { return strategy->cross_task == strategy::CrossTask::kParameterServer; }
  // The training tasks need a group (connected by the runtime before the strategy is made).
  bool needs_tasks_group() const { return tasks != TasksGroup::kNone; }
  // The decision about `what` ("device", "threads", ...); nullptr when the plan has none.
  const Decision* decision(const std::string& what) const;
};

// The plan of this task (cluster.task; a single process without a cluster) of
// `job` on `machine`. Pure: no I/O, no device touched, nothing printed. Throws
// the job's ConfigErrors that the plan finds: task types the strategy cannot use,
// strategy.communication nccl without a GPU, devices that are not there, a
// pipeline split that does not match the tasks, a memory estimate over
// runtime.memory_limit is NOT one (the trainer prints and holds it).
ExecutionPlan make_execution_plan(const job::JobConfig& job, const config::ClusterConfig& cluster,
                                  const Machine& machine);

// The training tasks' group for strategy.communication (a pipeline's stages:
// `point_to_point`, always Gloo's ring) with `training_tasks` on `machines`:
// auto is hierarchical where tasks share a machine (on one machine too: shared
// memory alone), else Gloo's own. `why`, if given, gets the reason.
TasksGroup training_tasks_group(strategy::Communication communication, bool point_to_point, int training_tasks,
                                int machines, std::string* why = nullptr);

// `plan` with a pipeline's measured split (strategy.stages "auto", measured when
// the tasks met): the split and this task's memory estimate replaced.
ExecutionPlan with_stage_split(const ExecutionPlan& plan, const job::JobConfig& job, strategy::StageSplit split);

// The parts that differ between two plans of one task ("tasks", "gradients",
// "devices", "threads", "split", ...): what must be connected or set up again.
std::vector<std::string> changed_parts(const ExecutionPlan& before, const ExecutionPlan& after);

// The plan for people: one line per decision, "what: choice (why)".
std::string describe(const ExecutionPlan& plan);
// The plan as one JSON object's text (`dtrain validate --json`).
std::string to_json(const ExecutionPlan& plan);

// Names, as describe() and to_json() write them.
const char* role_name(Role role);
const char* tasks_group_name(TasksGroup group);
const char* activations_name(Activations activations);

}  // namespace dtrain::plan
