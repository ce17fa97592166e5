// Where a task's gradients are combined: the one decision that picks the
// gradient sync a strategy builds (gradient_sync.h). The execution plan makes it
// (plan/execution_plan.h: ExecutionPlan::gradients, with the reasons for
// people); a strategy built without a plan (in-process tests) asks the same
// function with what its context knows, so the rule is written once, here.
#pragma once

#include "strategy/strategy_spec.h"

namespace dtrain::strategy {

struct StrategyEntry;  // registry.h

enum class Gradients {
  kNone,               // one replica, nothing to combine
  kLocalSharedMemory,  // the replicas of this process, through shared memory between their threads
  kLocalNccl,          // the replicas of this process on several GPUs, in a local NCCL group
  kCentralCopy,        // the replicas' mean updates one central copy on the host (central_storage)
  kTasks,              // all-reduced over the training tasks' group
  kReplicasThenTasks,  // the replicas in the process first, then replica 0 over the tasks' group
  kNccl,               // all-reduced on the GPU, in an NCCL group of the training tasks
  kShardedOptimizer,   // reduce-scattered over the tasks' group, parameters all-gathered (ZeRO-1)
  kShardedGradients,   // reduce-scattered layer by layer as backward goes, parameters all-gathered (ZeRO-2)
  kShardedParameters,  // reduce-scattered layer by layer; each layer's parameters gathered before it runs (ZeRO-3)
  kStageCopies,        // a pipeline stage's, all-reduced with the same stage of the other copies
  kStageAlone,         // a pipeline stage's, applied as they are (one copy of the pipeline)
  kParameterServers,   // pushed to the ps tasks, which apply them
};

// What the decision depends on besides the strategy section.
struct GradientInputs {
  int local_replicas = 1;   // replicas in this process
  int training_tasks = 1;   // the tasks training in lock-step
  bool tasks_group = false;  // the training tasks are connected by a group (a cluster)
  // The training tasks' gradients may go through NCCL on their GPUs (a GPU job,
  // a build with NCCL, communication auto or nccl, no GPU shared by two tasks).
  bool nccl_tasks = false;
  // The local replicas are on GPUs and may reduce in a local NCCL group.
  bool nccl_local = false;
};

Gradients gradient_path(const StrategySpec& strategy, const StrategyEntry& entry, const GradientInputs& in);

// For people ("all-reduced over the training tasks' group").
const char* gradients_name(Gradients gradients);

}  // namespace dtrain::strategy
