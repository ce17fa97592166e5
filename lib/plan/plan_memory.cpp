// Implementation of plan_memory.h: the memory query of a training task, by strategy.
#include "plan/plan_memory.h"

#include <algorithm>

#include "core/strings.h"
#include "strategy/registry.h"

namespace dtrain::plan {
namespace {

// A pipeline job: the model is cut into stages (only pipeline takes strategy.stages).
bool cuts_stages(const job::JobConfig& job) { return job.strategy.stages_auto || !job.strategy.stages.empty(); }

strategy::MemoryQuery base_query(const job::JobConfig& job) {
  strategy::MemoryQuery q;
  q.model = job.model;
  q.optimizer = job.optimizer;
  q.batch_rows = job.train.batch_size_per_replica;
  q.gradient_accumulation_steps = job.train.gradient_accumulation_steps;
  q.limit_bytes = job.runtime.memory_limit;
  return q;
}

}  // namespace

strategy::MemoryQuery memory_query(const job::JobConfig& job, int training_tasks) {
  const strategy::StrategyEntry& entry = strategy::entry_of(job.strategy);
  strategy::MemoryQuery q = base_query(job);
  if (entry.local_replicas) q.local_replicas = std::max<int64_t>(1, job.strategy.replicas);
  q.central_copy = entry.central_copy;
  q.slots_on_ps = entry.cross_task == strategy::CrossTask::kParameterServer;
  if (job.strategy.shard_optimizer_state) q.optimizer_shards = std::max(1, training_tasks);
  q.tensor_parallel = job.strategy.tensor_parallel;
  if (cuts_stages(job)) {
    // Until the stages are known: the whole model, a replica's micro-batches all held.
    const int64_t m = std::max<int64_t>(1, job.strategy.micro_batches);
    q.batch_rows = (job.train.batch_size_per_replica + m - 1) / m;
    q.batches_in_flight = m;
  }
  return q;
}

strategy::MemoryQuery pipeline_stage_memory_query(const job::JobConfig& job, size_t first_layer, size_t last_layer,
                                                  int64_t micro_batch_rows, int64_t batches_in_flight) {
  strategy::MemoryQuery q = base_query(job);
  q.first_layer = static_cast<int64_t>(first_layer);
  q.last_layer = static_cast<int64_t>(last_layer);
  q.batch_rows = micro_batch_rows;
  q.batches_in_flight = batches_in_flight;
  q.needs_input_gradient = first_layer > 0;
  return q;
}

TaskMemory task_memory(const job::JobConfig& job, int training_tasks, int rank, const strategy::StageSplit* split) {
  const strategy::MemoryQuery query = memory_query(job, training_tasks);
  if (!cuts_stages(job)) return {strategy::estimate_memory(query), "", true};
  if (!split) return {strategy::estimate_memory(query), "", false};  // no cluster to cut the model over yet
  // This task's stage: its layers, one micro-batch's activations (the layers keep
  // one forward pass; the stage's other micro-batches in flight keep only their
  // inputs, for the forward run again before their backward).
  const std::vector<nn::LayerInfo> layers = nn::describe_layers(job.model);
  const int stages = static_cast<int>(split->stages());
  const strategy::StagePlace place = strategy::stage_of_task(rank, stages);
  const size_t first = split->starts[static_cast<size_t>(place.stage)];
  const size_t end = split->end_of(static_cast<size_t>(place.stage), layers.size());
  const int64_t m = job.strategy.micro_batches;
  const int64_t in_flight = strategy::micro_batches_in_flight(job.strategy.schedule, place.stage, stages,
                                                              m * job.train.gradient_accumulation_steps);
  strategy::MemoryQuery stage = pipeline_stage_memory_query(job, first, end, job.train.batch_size_per_replica / m, 1);
  stage.held_inputs = in_flight - 1;
  return {strategy::estimate_memory(stage),
          str("Pipeline stage ", place.stage, " of ", stages, ": layers ", layers[first].name, "..",
              layers[end - 1].name),
          true};
}

}  // namespace dtrain::plan
