// Implementation of gradient_path.h.
#include "strategy/sync/gradient_path.h"

#include "strategy/planning/pipeline_stages.h"
#include "strategy/registry.h"

namespace dtrain::strategy {

Gradients gradient_path(const StrategySpec& s, const StrategyEntry& entry, const GradientInputs& in) {
  if (entry.cross_task == CrossTask::kParameterServer) return Gradients::kParameterServers;
  if (entry.point_to_point)
    return pipeline_copies(s, in.training_tasks) > 1 ? Gradients::kStageCopies : Gradients::kStageAlone;
  if (entry.central_copy) return Gradients::kCentralCopy;
  if (in.tasks_group) {
    // (tensor_parallel: a copy's tasks hold parts; the tasks holding a part in every copy reduce it)
    if (s.tensor_parallel > 1) return in.training_tasks > s.tensor_parallel ? Gradients::kTasks : Gradients::kNone;
    if (s.shard_optimizer_state) return Gradients::kShardedOptimizer;
    if (s.shard == ShardMode::kGradients) return Gradients::kShardedGradients;
    if (s.shard == ShardMode::kParameters) return Gradients::kShardedParameters;
    if (in.local_replicas > 1) return Gradients::kReplicasThenTasks;
    return in.nccl_tasks ? Gradients::kNccl : Gradients::kTasks;
  }
  if (in.local_replicas > 1) return in.nccl_local ? Gradients::kLocalNccl : Gradients::kLocalSharedMemory;
  return Gradients::kNone;
}

const char* gradients_name(Gradients gradients) {
  switch (gradients) {
    case Gradients::kNone: return "none";
    case Gradients::kLocalSharedMemory: return "averaged in shared memory between the replicas' threads";
    case Gradients::kLocalNccl: return "averaged in a local NCCL group of the replicas' GPUs";
    case Gradients::kCentralCopy: return "averaged into the central copy";
    case Gradients::kTasks: return "all-reduced over the training tasks' group";
    case Gradients::kReplicasThenTasks: return "reduced in the process, then over the training tasks' group";
    case Gradients::kNccl: return "all-reduced with NCCL on the GPU";
    case Gradients::kShardedOptimizer: return "reduce-scattered, parameters all-gathered (ZeRO-1)";
    case Gradients::kShardedGradients:
      return "reduce-scattered layer by layer as backward goes, parameters all-gathered after the update (ZeRO-2)";
    case Gradients::kShardedParameters:
      return "reduce-scattered layer by layer; each layer's parameters all-gathered before it runs, freed after "
             "(ZeRO-3)";
    case Gradients::kStageCopies: return "each stage's all-reduced over its copies";
    case Gradients::kStageAlone: return "each stage's applied by the stage";
    case Gradients::kParameterServers: return "pushed to the ps tasks";
  }
  return "?";
}

}  // namespace dtrain::strategy
