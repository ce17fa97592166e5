// Implementation of plan_memory.h: the memory query of a training task, by strategy.
#include "plan/plan_memory.h"

#include <algorithm>

#include "core/error.h"
#include "core/strings.h"
#include "strategy/planning/parallel_grid.h"
#include "strategy/registry.h"
#include "strategy/planning/tensor_split.h"

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
  q.tensor_parallel = job.strategy.tensor_parallel;
  q.tensor_whole = job.strategy.tensor_whole;
  q.tensor_vocabulary_loss = strategy::vocabulary_parallel_loss(job.loss);
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
  if (job.strategy.shard == strategy::ShardMode::kGradients || job.strategy.shard == strategy::ShardMode::kParameters) {
    q.full_shard = strategy::shard_mode_name(job.strategy.shard);
    q.full_shards = q.optimizer_shards = std::max(1, training_tasks);
    q.prefetch = job.strategy.prefetch;
    q.min_unit_params = job.strategy.min_unit_params;
  }
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

std::string ways_that_fit(const job::JobConfig& job, int training_tasks) {
  if (training_tasks < 2 || job.runtime.memory_limit <= 0) return "";
  std::vector<std::string> fit, too_big;
  const auto record = [&](const std::string& what, int64_t bytes) {
    (bytes <= job.runtime.memory_limit ? fit : too_big)
        .push_back(str(what, " (", format_bytes(static_cast<double>(bytes)), ")"));
  };
  const auto consider = [&](const std::string& what, const job::JobConfig& changed) {
    record(what, strategy::estimate_memory(memory_query(changed, training_tasks)).total);
  };
  job::JobConfig j = job;
  j.strategy.type = &strategy::find_strategy("multi_worker_mirrored");
  j.strategy.replicas = 1;
  j.strategy.stages.clear();
  j.strategy.stages_auto = false;
  j.strategy.tensor_parallel = 1;
  for (strategy::ShardMode mode :
       {strategy::ShardMode::kParameters, strategy::ShardMode::kGradients, strategy::ShardMode::kOptimizerState}) {
    job::JobConfig m = j;
    m.strategy.shard = mode;
    m.strategy.shard_optimizer_state = mode == strategy::ShardMode::kOptimizerState;
    consider(str("strategy.shard \"", strategy::shard_mode_name(mode), "\""), m);
  }
  for (int t = 2; t <= training_tasks; ++t) {
    if (training_tasks % t != 0 ||
        strategy::tensor_split_plan(job.model, t, {}, strategy::vocabulary_parallel_loss(job.loss)).empty())
      continue;
    job::JobConfig m = j;
    m.strategy.tensor_parallel = t;
    try {
      strategy::check_tensor_parallel(m.strategy_job(), training_tasks);
    } catch (const ConfigError&) {
      continue;  // (not for this job: mixed precision)
    }
    consider(str("strategy.tensor_parallel ", t), m);
  }
  // A pipeline of one stage per task, or per T tasks with tensor_parallel T, cut
  // by parameter bytes (stages "auto" before it measures): its largest stage.
  const std::vector<nn::LayerInfo> layers = nn::describe_layers(job.model);
  for (int t = 1; 2 * t <= training_tasks; ++t) {
    if (training_tasks % t != 0) continue;
    job::JobConfig m = j;
    m.strategy.type = &strategy::find_strategy("pipeline");
    m.strategy.shard = strategy::ShardMode::kNone;
    m.strategy.shard_optimizer_state = false;
    m.strategy.stages_auto = true;
    m.strategy.data_parallel = 1;
    m.strategy.tensor_parallel = t;
    if (job.train.batch_size_per_replica % m.strategy.micro_batches != 0) m.strategy.micro_batches = 1;
    const int stages = training_tasks / t;
    try {
      const strategy::StageSplit split = strategy::pipeline_split(m.strategy, layers, training_tasks);
      if (t > 1) strategy::check_tensor_parallel(m.strategy_job(), training_tasks, split.starts);
      int64_t largest = 0;
      for (int rank = 0; rank < training_tasks; rank += t)
        largest = std::max(largest, task_memory(m, training_tasks, rank, &split).estimate.total);
      record(str("strategy.type \"pipeline\" with ", stages, " stages", t > 1 ? str(" x tensor_parallel ", t) : ""),
             largest);
    } catch (const ConfigError&) {
      continue;  // (fewer layers than stages; nothing to split in the stages)
    }
  }
  std::string out = str("with ", training_tasks, " training tasks");
  if (fit.empty()) return str(out, " none fits either: ", join(too_big, ", "));
  out += str(", these fit: ", join(fit, ", "));
  if (!too_big.empty()) out += str("; these do not: ", join(too_big, ", "));
  return out;
}

TaskMemory task_memory(const job::JobConfig& job, int training_tasks, int rank, const strategy::StageSplit* split) {
  const strategy::MemoryQuery query = memory_query(job, training_tasks);
  if (!cuts_stages(job)) return {strategy::estimate_memory(query), "", true, training_tasks};
  if (!split) return {strategy::estimate_memory(query), "", false, training_tasks};  // no cluster to cut the model over yet
  // This task's stage: its layers, one micro-batch's activations (the layers keep
  // one forward pass; the stage's other micro-batches in flight keep only their
  // inputs, for the forward run again before their backward).
  const std::vector<nn::LayerInfo> layers = nn::describe_layers(job.model);
  const int stages = static_cast<int>(split->stages());
  const int parts = static_cast<int>(job.strategy.tensor_parallel);
  const strategy::GridPlace place =
      strategy::ParallelGrid(std::max(1, training_tasks / (stages * parts)), stages, parts).place(rank);
  const size_t first = split->starts[static_cast<size_t>(place.stage)];
  const size_t end = split->end_of(static_cast<size_t>(place.stage), layers.size());
  const int64_t m = job.strategy.micro_batches;
  const int64_t in_flight = strategy::micro_batches_in_flight(job.strategy.schedule, place.stage, stages,
                                                              m * job.train.gradient_accumulation_steps);
  strategy::MemoryQuery stage = pipeline_stage_memory_query(job, first, end, job.train.batch_size_per_replica / m, 1);
  stage.held_inputs = in_flight - 1;
  stage.tensor_stage_starts = split->starts;
  return {strategy::estimate_memory(stage),
          str("Pipeline stage ", place.stage, " of ", stages, ": layers ", layers[first].name, "..",
              layers[end - 1].name,
              job.strategy.tensor_parallel > 1
                  ? str(", part ", place.part, " of ", job.strategy.tensor_parallel, " of its split layers")
                  : ""),
          true, training_tasks};
}

}  // namespace dtrain::plan
