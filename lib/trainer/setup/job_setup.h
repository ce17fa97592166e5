// What every entry point of the trainer does before stepping, from the task's
// execution plan (private to lib/trainer), by concern: the device and threads
// (device_setup.cpp), memory (memory_setup.cpp), the data (data_setup.cpp),
// evaluation and the epoch's figures (setup/evaluation.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "job/job_config.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "nn/sequential.h"
#include "plan/execution_plan.h"
#include "strategy/planning/memory_estimate.h"
#include "strategy/planning/pipeline_stages.h"
#include "strategy/strategy.h"
#include "trainer/reporting/progress.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {

// The plan's threads applied to the compute backend (and its notice logged:
// cores shared by the tasks of this machine).
void apply_threads(const plan::ExecutionPlan& plan);

// The plan's device (replica 0's) made ready (kernels::select_device; the
// strategy readies its other replicas' GPUs), TF32 as DTRAIN_ALLOW_TF32 says, and
// train.precision checked on it (check_precision).
Device prepare_device(const job::JobConfig& job, const plan::ExecutionPlan& plan);
// train.precision on `device`: what runs, what is refused (ConfigError:
// mixed_float16 on the CPU, whose backend has no float16 kernels), one warning
// where bfloat16 runs on a CPU without bf16 instructions, and on a GPU one line
// saying which layers compute in bfloat16 or float16 there.
void check_precision(const job::JobConfig& job, const Device& device);
// "cpu:0", or "cuda:0 (NVIDIA H100 80GB HBM3, 79.2 GiB, sm_90)".
std::string describe_device(const Device& device);

// The plan with a pipeline's "auto" split measured (plan.measure_split; the
// plan itself otherwise): the layers balanced by their forward + backward time,
// measured by the chief (strategy/planning/pipeline_profile.h) where the whole model fits
// runtime.memory_limit in one task, else by parameter bytes. Collective over `workers`.
plan::ExecutionPlan settle_stage_split(const job::JobConfig& job, const plan::ExecutionPlan& plan,
                                       comm::Communicator* workers);

// Prints a task's memory estimate to stdout ("Memory per task (estimate): ...",
// after its stage's line for a pipeline); ConfigError (exit 2) naming the figures,
// the biggest layers and the fixes when it is over runtime.memory_limit (where
// it is held against it). Call it before the strategy allocates the model.
// print false: the check alone (an elastic job's re-formed group).
strategy::MemoryEstimate check_memory(const job::JobConfig& job, const plan::TaskMemory& memory, bool print = true);

// What the strategy gets: the plan's devices and local group, the communicators
// the runtime connected (`workers`, `gradients`: nullptr where the plan has none).
strategy::StrategyContext strategy_context(const plan::ExecutionPlan& plan, comm::Communicator* workers,
                                           comm::Communicator* gradients);

// Loads a data source and checks it against the model: sample size equals the
// model's input size, and every label is a valid class of the model's output.
// `shapes`: the whole model's (a pipeline stage's own model holds only its layers).
std::shared_ptr<data::Dataset> load_checked(const data::DataSourceSpec& spec, const strategy::ModelShapes& shapes);
std::shared_ptr<data::Dataset> load_checked(const data::DataSourceSpec& spec, const nn::Sequential& model);

// The sample-shape check alone (for validate, which reads only headers).
void check_input_shape(const data::DataSourceSpec& spec, const Shape& sample_shape, const Shape& model_input);

// data.shard_policy as it applies with `num_workers` training tasks: "auto" is
// "file" for a source whose format shards by file (tfrecord) when it has at least
// one file per worker, as TF's AUTO does for file-based datasets; else "data".
data::ShardPolicy shard_policy(const job::JobConfig& job, int num_workers);

// The training source this task reads: with shard_policy "file", only its share of
// the source's files (round-robin over workers, globs expanded); otherwise the
// whole source.
data::DataSourceSpec task_source(const job::JobConfig& job, int worker_rank, int num_workers);

// Training batches of this task: per-replica batch x local replicas, sharded over
// the workers after the shuffle (shard_policy auto/data), or not (off, file);
// `prefetch` from the plan (plan.prefetch).
data::PipelineOptions train_pipeline_options(const job::JobConfig& job, const strategy::Strategy& s,
                                             int worker_rank, int num_workers, int64_t prefetch);

// The steps of an epoch of `train` (its batches over the accumulation steps, at
// most train.steps_per_epoch); ConfigError when not one full step fits in it (a
// batch larger than the task's samples where the pipeline drops the remainder).
int64_t steps_per_epoch(const job::JobConfig& job, const strategy::Strategy& s, const data::Pipeline& train);

// Evaluation batches: the whole test set in order, on every task.
data::PipelineOptions eval_pipeline_options(const job::JobConfig& job, int64_t prefetch);

// Mean loss and accuracy of summed stats, per label position (per sample for
// class labels, per token for a sequence's; 0 with no samples).
double mean_loss(const nn::LossStats& s);
double accuracy(const nn::LossStats& s);

// The whole test set through the strategy's eval_step, in order.
nn::LossStats evaluate(strategy::Strategy& strategy, data::Pipeline& pipeline);

// An epoch's report from its training stats (validation filled in by the caller);
// `label_width`: the training data's labels per sample.
EpochReport epoch_report(int64_t epoch, int64_t epochs, int64_t steps, double seconds, const nn::LossStats& stats,
                         int64_t label_width);

}  // namespace dtrain::trainer
