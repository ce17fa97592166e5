// What every entry point of the trainer does before stepping: resolve the thread
// count, load the data, and check data against the model (private to lib/trainer).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "job/job_config.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "nn/sequential.h"
#include "strategy/memory_estimate.h"
#include "strategy/pipeline_stages.h"
#include "strategy/strategy.h"
#include "trainer/progress.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {

// runtime.threads, else OMP_NUM_THREADS, else usable cores / tasks on this host
// (HostSettings::tasks_on_host); applied to the compute backend.
int setup_threads(const job::JobConfig& job, const HostSettings& host);

// The job's "device", resolved and made ready (kernels::select_device). "auto"
// with several replicas in one process means the CPU unless strategy.devices
// names GPUs or the job is mirrored with a GPU for each replica (the strategy
// sets up the other GPUs: replica_devices.h). host.allow_tf32 false turns TF32
// convolutions off.
// Also checks train.precision on the chosen device (check_precision).
Device select_job_device(const job::JobConfig& job, const HostSettings& host);
// train.precision on `device`: what runs, what is refused (ConfigError:
// mixed_float16 on the CPU, whose backend has no float16 kernels), one warning
// where bfloat16 runs on a CPU without bf16 instructions, and on a GPU one line
// saying which layers compute in bfloat16 or float16 there.
void check_precision(const job::JobConfig& job, const Device& device);
// A device that names no GPU index ("auto", "gpu", "cuda") on a machine with
// GPUs, for the task with this LOCAL_RANK (as dtrain launch and torchrun set it):
// "cuda:<LOCAL_RANK % GPUs>", so local tasks spread over the GPUs. Otherwise
// (local_rank < 0: unset) `device` unchanged.
std::string local_gpu(const std::string& device, int local_rank);
// "cpu:0", or "cuda:0 (NVIDIA H100 80GB HBM3, 79.2 GiB, sm_90)".
std::string describe_device(const Device& device);
// What select_job_device would pick, with the other replicas' GPUs, without
// making them ready (for validate); throws the same ConfigError when a GPU is
// asked for and none is usable, or the replicas' GPUs are not there.
std::string check_job_device(const job::JobConfig& job);

// A pipeline job's stage split (nullopt for other jobs): strategy.stages, or with
// "auto" the layers balanced by their forward + backward time, measured by the
// chief on a few steps of the whole model with one micro-batch (the profiler of
// `bench train --profile`) and broadcast to every task, so all take the same
// split; by parameter bytes when the whole model would not fit
// runtime.memory_limit in one task. Collective over `workers`.
std::optional<strategy::StageSplit> plan_pipeline(const job::JobConfig& job, comm::Communicator* workers);

// Memory accounting (strategy/memory_estimate.h). The query of one training task
// of `job` among `training_tasks` (chief + workers): every layer, batches of
// train.batch_size_per_replica rows, the strategy's local replicas (mirrored,
// central_storage, multi_worker_mirrored) each with its own state, the central
// copy (central_storage), optimizer slots split over the training tasks with
// strategy.shard_optimizer_state, an accumulation buffer with
// train.gradient_accumulation_steps > 1. A parameter_server worker counts the
// slots too: it keeps a copy of them for checkpoints. A pipeline job gets the
// whole model here, with one replica's micro-batches all in flight (an upper
// bound: its stages are checked with pipeline_stage_memory_query).
strategy::MemoryQuery memory_query(const job::JobConfig& job, int training_tasks);

// PIPELINE HOOK, for strategy.type "pipeline" once its stage split is known: the
// query of the stage holding layers [first_layer, last_layer) of model.layers,
// running micro-batches of `micro_batch_rows` rows of which `batches_in_flight`
// have their activations held at the peak (gpipe: all micro-batches; 1f1b: at most
// the stages after this one, plus one). The stages after the first compute their
// input's gradient (sent upstream). Check it with check_memory.
strategy::MemoryQuery pipeline_stage_memory_query(const job::JobConfig& job, size_t first_layer, size_t last_layer,
                                                  int64_t micro_batch_rows, int64_t batches_in_flight);

// Estimates `query` and prints it to stdout ("Memory per task (estimate): ...");
// ConfigError (exit 2) naming the figures, the biggest layers and the fixes when it
// is over runtime.memory_limit. Call it before the strategy allocates the model.
strategy::MemoryEstimate check_memory(const job::JobConfig& job, const strategy::MemoryQuery& query);
// check_memory of memory_query(job, training_tasks); for a pipeline job, of the
// stage that training task `rank` holds (its layers, one micro-batch's
// activations and the inputs of its other micro-batches in flight). A pipeline
// job with no cluster yet (validate without one) prints the whole model's
// estimate, not held against the limit.
strategy::MemoryEstimate check_task_memory(const job::JobConfig& job, int training_tasks, int rank = 0,
                                           const strategy::StageSplit* split = nullptr);

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

// data.prefetch as set, or for "auto" (the default): 2 batches when the prefetch
// thread has a core of its own (a GPU job, whose training thread mostly waits for
// the GPU; or a host whose cores the tasks' compute threads, `threads` each or one
// per local replica, do not all take), else 0: there the batch is assembled on
// the training thread, since a prefetch thread could only run by interrupting a
// training thread in the middle of its step (measured in the README).
int64_t prefetch_batches(const job::JobConfig& job, const HostSettings& host, int threads, int local_replicas,
                         const Device& device);

// Training batches of this task: per-replica batch x local replicas, sharded over
// the workers after the shuffle (shard_policy auto/data), or not (off, file);
// `prefetch` from prefetch_batches().
data::PipelineOptions train_pipeline_options(const job::JobConfig& job, const strategy::Strategy& s,
                                             int worker_rank, int num_workers, int64_t prefetch);

// Evaluation batches: the whole test set in order, on every task.
data::PipelineOptions eval_pipeline_options(const job::JobConfig& job, int64_t prefetch);

// Mean loss and accuracy of summed stats (0 with no samples).
double mean_loss(const nn::LossStats& s);
double accuracy(const nn::LossStats& s);

// The whole test set through the strategy's eval_step, in order.
nn::LossStats evaluate(strategy::Strategy& strategy, data::Pipeline& pipeline);

// An epoch's report from its training stats (validation filled in by the caller).
EpochReport epoch_report(int64_t epoch, int64_t epochs, int64_t steps, double seconds, const nn::LossStats& stats);

}  // namespace dtrain::trainer
