// Memory accounting of the plan (strategy/planning/memory_estimate.h does the sums): the
// query of one training task of a job, from its strategy's shape of the work.
#pragma once

#include <string>

#include "job/job_config.h"
#include "strategy/planning/memory_estimate.h"
#include "strategy/planning/pipeline_stages.h"

namespace dtrain::plan {

// The query of one training task of `job` among `training_tasks` (chief +
// workers): every layer, batches of train.batch_size_per_replica rows, the
// strategy's local replicas (mirrored, central_storage, multi_worker_mirrored)
// each with its own state, the central copy (central_storage), optimizer slots
// split over the training tasks with strategy.shard_optimizer_state, an
// accumulation buffer with train.gradient_accumulation_steps > 1. A
// parameter_server worker counts the slots too: it keeps a copy of them for
// checkpoints. A pipeline job gets the whole model here, with one replica's
// micro-batches all in flight (an upper bound: its stages are estimated with
// pipeline_stage_memory_query).
strategy::MemoryQuery memory_query(const job::JobConfig& job, int training_tasks);

// The query of the pipeline stage holding layers [first_layer, last_layer) of
// model.layers, running micro-batches of `micro_batch_rows` rows of which
// `batches_in_flight` have their activations held at the peak. The stages after
// the first compute their input's gradient (sent upstream).
strategy::MemoryQuery pipeline_stage_memory_query(const job::JobConfig& job, size_t first_layer, size_t last_layer,
                                                  int64_t micro_batch_rows, int64_t batches_in_flight);

// One task's memory as the plan holds it: the estimate, the line that names
// what it is of ("Pipeline stage 0 of 2: layers dense..dense_1"; "" for a whole
// model) and whether it is held against runtime.memory_limit (a pipeline job
// with no cluster to cut over yet: the whole model, not held).
struct TaskMemory {
  strategy::MemoryEstimate estimate;
  std::string heading;
  bool checked = true;
  int training_tasks = 1;
};

// For a task that does not fit runtime.memory_limit: each way dtrain splits the
// model over `training_tasks` (multi_worker_mirrored's shard "optimizer_state",
// "gradients", "parameters" and tensor_parallel at each T that divides them and
// splits a layer; a pipeline of one stage per task, or per T tasks with
// tensor_parallel T, cut by parameter bytes: its largest stage), with its
// estimate, those that fit first: "with 4 training tasks, these fit:
// strategy.shard \"parameters\" (61.3 MiB), ...". "" with fewer than 2 tasks.
std::string ways_that_fit(const job::JobConfig& job, int training_tasks);

// The memory of training task `rank` of `training_tasks`: memory_query's, or
// for a pipeline job (split given) the stage it holds: its layers, one
// micro-batch's activations and the inputs of its other micro-batches in flight.
TaskMemory task_memory(const job::JobConfig& job, int training_tasks, int rank, const strategy::StageSplit* split);

}  // namespace dtrain::plan
