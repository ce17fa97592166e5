// StrategySpec: the typed `strategy` section of a job (tf.distribute's names),
// read through the strategy registry (registry.h).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "config/job_file.h"
#include "config/section.h"
#include "nn/model_spec.h"
#include "optim/optimizer_spec.h"
#include "ps/placement.h"
#include "ps/ps_server.h"

namespace dtrain::strategy {

struct StrategyEntry;  // registry.h

// strategy.communication, TF's CommunicationImplementation: how the training
// tasks' all-reduce runs. auto: hierarchical where tasks share a machine, else
// Gloo's own choice (NCCL for the gradients of a GPU job in builds with NCCL); ring: Gloo's ring by name; hierarchical: shared memory within a
// machine, Gloo between machines; nccl: NCCL on device buffers (GPU jobs, builds
// with NCCL: registry.h's check_communication_device).
enum class Communication { kAuto, kRing, kHierarchical, kNccl };

// strategy.allreduce_dtype: the type gradients travel in between tasks.
// bfloat16 halves the bytes; the sums are accumulated in float32 where the
// backend allows.
enum class AllreduceDType { kFloat32, kBfloat16 };

// strategy.schedule (pipeline): the order of a step's micro-batches on each stage.
// 1f1b: after a warm-up of forwards, one forward then one backward (at most S
// micro-batches' activations held on the first stage); gpipe: all forwards, then
// all backwards (M micro-batches' activations held on every stage).
enum class PipelineSchedule { k1F1B, kGpipe };

// strategy.elastic (multi_worker_mirrored): the training tasks may change while
// the job runs. A lost worker is survived: the others agree on who is left,
// connect again and go on from the last step they completed, in memory.
struct ElasticSpec {
  bool on = false;
  int64_t min_workers = 1;  // training tasks (chief and workers) below which the job checkpoints and stops
  int64_t max_workers = 0;  // at most (0: the cluster's training tasks)
  // The job starts once min_workers training tasks joined and this many
  // seconds passed with some still missing (torchrun's last call, 30 s): the
  // rest join the running job when they come. 0 with all present at once: no wait.
  double settle_seconds = 30.0;
  // "global" (the only rule built): the global batch stays the one the job
  // started with; as tasks leave, each takes more accumulation steps (Keras'
  // expectation: the same updates with fewer replicas).
  std::string batch = "global";
};

// strategy.shard: what the tasks of multi_worker_mirrored split among them.
enum class ShardMode {
  kNone,            // every task holds everything (plain data parallelism)
  kOptimizerState,  // ZeRO-1: the optimizer slots (shard_optimizer_state)
  kGradients,       // ZeRO-2: the slots and the gradients
  kParameters,      // ZeRO-3 / FSDP: the slots, the gradients and the parameters
};
// "none", "optimizer_state", "gradients", "parameters".
const char* shard_mode_name(ShardMode mode);

struct StrategySpec {
  std::string path = "strategy";
  const StrategyEntry* type = nullptr;  // nullptr until read: one_device
  // Strategies with local replicas (mirrored): the replicas in this process, from
  // `devices` (["cpu:0", "cpu:1"], like TF's logical devices) or `replicas` (N).
  std::vector<std::string> devices;
  int64_t replicas = 1;
  Communication communication = Communication::kAuto;
  AllreduceDType allreduce_dtype = AllreduceDType::kFloat32;
  int64_t bytes_per_pack = 25 << 20;  // gradient bucket size (PyTorch DDP's 25 MiB); 0 = auto
  // parameter_server:
  ps::UpdateMode mode = ps::UpdateMode::kAsync;  // strategy.mode: async | sync | stale
  int64_t max_staleness = 0;                     // stale: at most this many steps ahead of the slowest
  ps::PartitionerSpec partitioner;               // strategy.variable_partitioner
  int64_t steps_per_unit = 20;                   // strategy.steps_per_work_unit
  // multi_worker_mirrored: ZeRO stage 1 (strategy.shard_optimizer_state, or
  // strategy.shard "optimizer_state"): each task keeps and updates only its 1/N
  // slice of the optimizer state.
  bool shard_optimizer_state = false;
  // multi_worker_mirrored: what each task keeps 1/N of beyond the optimizer
  // state (strategy.shard; fully_sharded.h): the gradients too (ZeRO stage 2),
  // or the parameters as well (ZeRO stage 3, FSDP).
  ShardMode shard = ShardMode::kNone;
  // ZeRO-3: each layer's gather for the next layer starts while this one computes.
  bool prefetch = true;
  // ZeRO-2/3: consecutive top-level layers make one unit until it holds at least
  // this many trainable parameters (FSDP's size-based wrap); 0: a unit per layer.
  int64_t min_unit_params = 0;
  // multi_worker_mirrored: the tasks that hold one copy of the model between
  // them (tensor parallelism, tensor_parallel.h); 1: none.
  int64_t tensor_parallel = 1;
  // strategy.tensor_split: the layers kept whole that tensor_parallel would
  // split ({"dense": "none"}; tensor_parallel.h's names).
  std::set<std::string> tensor_whole;
  // pipeline: the layer names where each stage after the first begins (empty with
  // stages_auto: balanced by measured per-layer time), the micro-batches a
  // replica's batch is cut into, their schedule, and the copies of the pipeline
  // (tasks = stages x data_parallel x tensor_parallel; 0: not given, the rest of
  // the training tasks: pipeline_copies()).
  std::vector<std::string> stages;
  bool stages_auto = false;
  int64_t micro_batches = 4;
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int64_t data_parallel = 0;
  ElasticSpec elastic;
};

// The registry entry of `spec` (one_device when the section was absent).
const StrategyEntry& entry_of(const StrategySpec& spec);

// Reads the strategy section; an absent section is StrategySpec{} (one_device).
StrategySpec read_strategy_spec(const config::Value& value);

// What a strategy is built from (and what the planning rules read): the parts
// of the job it needs.
struct StrategyJob {
  const StrategySpec& strategy;
  const nn::ModelSpec& model;
  const nn::LossSpec& loss;
  const optim::OptimizerSpec& optimizer;
  const config::TrainSpec& train;
};

}  // namespace dtrain::strategy
