// Strategy: how a training step runs on this task's replicas and how their
// gradients are combined, in tf.distribute's terms.
//
// A strategy owns the model replicas, the loss and the optimizers. The trainer
// hands it this task's micro-batches for each step; the strategy splits them
// across its local replicas, runs forward/backward, averages gradients across
// every replica in sync (in-process for `mirrored`, over Gloo for
// `multi_worker_mirrored`, nothing for `one_device`) and applies the same update
// on every replica.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/job_file.h"
#include "data/pipeline.h"
#include "nn/losses.h"
#include "nn/sequential.h"
#include "optim/loss_scale.h"
#include "optim/optimizer.h"
#include "ps/ps_client.h"
#include "strategy/sync/gradient_path.h"
#include "strategy/strategy_spec.h"

namespace dtrain::strategy {

class StageLinks;  // pipeline_links.h
struct GridGroups;  // grid_groups.h

// What a strategy gets from the cluster runtime.
struct StrategyContext {
  // multi_worker_mirrored: the group of the job's training tasks (chief + workers).
  comm::Communicator* workers = nullptr;
  int threads = 1;  // compute threads of this process (shared among local replicas)
  Device device = Device::cpu();  // where the replicas compute (kernels::select_device)
  // parameter_server: this task's connections to every ps task.
  ps::PsGroup* ps = nullptr;
  // Dynamic loss scaling whatever train.precision says (mixed_float16 always has
  // it): lets a test check the scaling and skipping with float32 compute.
  bool loss_scaling = false;
  // multi_worker_mirrored on GPUs with NCCL: the training tasks' NCCL group, which
  // reduces the gradients on the device (GradientReducer's device path); the
  // other collectives (the chief's broadcast, metrics, checks) stay on `workers`.
  comm::Communicator* gradients = nullptr;
  // pipeline: the layer index where each stage begins, as the trainer decided it
  // (strategy.stages, or "auto" by measured time or parameter bytes); empty: the
  // strategy reads strategy.stages itself ("auto" by parameter bytes).
  std::vector<size_t> stage_starts = {};
  std::string stage_split_how = {};
  // pipeline on GPUs: the NCCL links to the neighbouring stages the runtime
  // connected (pipeline_links.h; owned by it, they outlive the strategy);
  // nullptr: the stages' tensors travel through Gloo on the copy's group.
  StageLinks* stage_links = nullptr;
  // A grid of pipeline stages or tensor parts: this task's groups in it, which
  // the runtime built (shared memory where a group lies on one machine; owned by
  // it, they outlive the strategy). nullptr: the strategy makes them by splitting
  // `workers` (in-process groups: tests).
  GridGroups* grid = nullptr;
  // The device of each local replica, as the execution plan decided (plan/):
  // mirrored on GPUs has one GPU per replica. Empty: every replica on `device`.
  std::vector<Device> replicas = {};
  // Several local replicas on GPUs reduce in a local NCCL group (the plan's
  // choice, in builds with NCCL); false: through shared memory between threads.
  bool local_nccl = false;
  // An elastic group that deals a micro-step's samples out unevenly (ElasticSplit):
  // the mean rows of a micro-batch over the group's replicas, which weights each
  // replica's gradient by its samples. 0: every replica takes the same rows.
  double mean_replica_rows = 0.0;
  // Where the gradients are combined, as the execution plan decided it (the
  // strategy builds that gradient sync, gradient_sync.h). nullopt (built without
  // a plan: in-process tests): the same rule (gradient_path.h) on this context.
  std::optional<Gradients> gradient_path = std::nullopt;
};

// Whether a strategy for `job` scales the loss (train.precision mixed_float16, or
// context.loss_scaling).
bool loss_scaling_on(const StrategyJob& job, const StrategyContext& context);

// Where the step time went, summed since the start.
struct StepTimings {
  double step_seconds = 0.0;       // whole train_step calls
  double comm_wait_seconds = 0.0;  // waiting for gradient all-reduces after backward
  // Where a data-parallel step's time goes (the rest of step_seconds is in none):
  double compute_seconds = 0.0;    // forward, loss and backward (all-reduces overlap it)
  double update_seconds = 0.0;     // the optimizer
  double metrics_seconds = 0.0;    // the loss/accuracy (and stop flag) all-reduce across tasks
  int64_t steps = 0;
};

// One piece of this task's share of a sharded checkpoint (StatePiece): elements
// [offset, offset + value->numel()) of the whole tensor `name` (row-major), whose
// shape is `whole_shape`. A whole tensor is one piece at offset 0.
struct StatePiece {
  std::string name;   // "dense/kernel", "dense/kernel/m": the whole tensor's checkpoint name
  Shape whole_shape;
  int64_t offset = 0;
  const Tensor* value = nullptr;  // float32, host or device
  bool optimizer = false;         // an optimizer slot (else a model tensor)
};

// Which part of the training data a task reads: shard `index` of `count`.
struct DataShard {
  int index = 0;
  int count = 1;
};

// The shapes of the whole model's samples: what the data must match.
struct ModelShapes {
  Shape input, output;
  nn::InputVocabulary vocabulary;  // the token ids the model takes, when it starts with an embedding
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Replicas that train in lock-step across the whole job (TF's num_replicas_in_sync).
  virtual int num_replicas_in_sync() const = 0;
  // Replicas in this process: each micro-batch holds this many per-replica batches.
  virtual int local_replicas() const = 0;

  // One update (0-based `step`) from train.gradient_accumulation_steps micro-batches
  // of this task. Adds the loss/accuracy of every replica of the job to stats.
  // `upcoming`, when given, are the next step's micro-batches: a GPU strategy
  // starts copying them to the device while this step computes.
  virtual void train_step(const std::vector<data::Batch>& micro_batches, int64_t step, nn::LossStats& stats,
                          const std::vector<data::Batch>* upcoming = nullptr) = 0;
  // Whether train_step makes use of `upcoming` (the trainer then reads ahead).
  virtual bool wants_upcoming() const { return false; }
  virtual Device device() const { return Device::cpu(); }
  // Stopping together: a task asks with request_stop() before a step; after the
  // step, stop_agreed() is true on every task if any task asked (the flag travels
  // with the step's loss all-reduce, so all stop after the same step).
  virtual void request_stop() = 0;
  virtual bool stop_agreed() const = 0;

  // Forward pass in inference mode on replica 0; adds loss/accuracy to stats.
  virtual void eval_step(const data::Batch& batch, nn::LossStats& stats) = 0;
  // Averages non-trainable state (batch-norm moving statistics) over all replicas,
  // so every replica holds identical parameters (before evaluation and at the end).
  virtual void sync_state() = 0;

  // Finds a tensor by its param name ("dense/kernel", "dense/kernel/m"), or nullptr.
  using TensorLookup = std::function<const Tensor*(const std::string& name)>;
  // Copies a checkpoint's parameters and optimizer state into every replica
  // (creating the optimizer's slots first). A missing tensor or a shape that
  // differs is a ConfigError naming it: the checkpoint is of another model.
  virtual void load_state(const TensorLookup& model, const TensorLookup& optimizer) = 0;
  // Every name load_state() looks up (model tensors and optimizer slots together):
  // resuming reads only these tensors of a checkpoint (a pipeline stage: its own
  // layers'), and a lookup of a name not listed is an InternalError. The default,
  // the names of model().params() and optimizer().state(), is right for a strategy
  // whose model() and optimizer() hold what this task loads, slots created: all of
  // today's (a pipeline stage's hold its layers; ZeRO-1's slot slices carry their
  // whole tensors' names, which it loads whole and slices).
  virtual std::vector<std::string> state_names_to_load();

  // Replica 0's model and optimizer (every replica holds the same parameters).
  virtual nn::Sequential& model() = 0;
  virtual optim::Optimizer& optimizer() = 0;
  virtual StepTimings timings() const = 0;
  // The dynamic loss scale (train.precision mixed_float16), or nullptr without
  // loss scaling. Its state goes into checkpoints; the trainer reports the scale.
  virtual optim::DynamicLossScale* loss_scale() { return nullptr; }

  // Strategies whose tasks hold different parts of the state (a pipeline's
  // stages, ZeRO-1's optimizer slices) return true, and their checkpoints are
  // sharded: every training task writes state_pieces(), the chief the manifest
  // (trainer/checkpointing.h). False (the default): replica 0's model() and
  // optimizer() hold everything and the chief writes them.
  virtual bool sharded_state() const { return false; }
  virtual std::vector<StatePiece> state_pieces() { return {}; }
  // Bytes of optimizer state (slots) this task holds: by default all of
  // optimizer().state(); 1/N of it under ZeRO-1 (optimizer_state_shards() N).
  virtual int64_t optimizer_state_bytes() {
    int64_t bytes = 0;
    for (const nn::Param* p : optimizer().state()) bytes += static_cast<int64_t>(p->value.bytes());
    return bytes;
  }
  virtual int optimizer_state_shards() const { return 1; }
  // SHA-256 of the whole model's parameters, as nn::Sequential::params_sha256
  // computes it for one model holding them all: the same on every task. Collective
  // for strategies with sharded parameters (every training task calls it).
  virtual std::string params_sha256() { return model().params_sha256(); }
  // Runs `use` while model() holds the whole model's values: ZeRO-3 gathers them
  // first and frees them after (collective there: every task calls it). Else
  // model() is as it is.
  virtual void with_whole_model(const std::function<void(nn::Sequential& model)>& use) { use(model()); }
  // The shard of the training data this task reads (`workers` rank and size for
  // data parallelism; a pipeline's copy for its stages). Default: the whole data.
  virtual DataShard data_shard() const { return {}; }
  // The whole model's input and output shapes per sample (a pipeline stage's
  // model() holds only its layers).
  virtual ModelShapes model_shapes() {
    return {model().input_shape(), model().output_shape(), model().input_vocabulary()};
  }
  // What this strategy measured or chose, as a JSON object's text ("" = nothing):
  // the run summary keeps it under the strategy's name (a pipeline's split and bubble).
  virtual std::string report_json() const { return ""; }
};

// Copies the tensors `lookup` finds under each param's name into `into` (a
// checkpoint's model or optimizer state, `what`); ConfigError naming a tensor that
// is missing or has another shape: the checkpoint is of another model.
void load_named(const std::vector<nn::Param*>& into, const Strategy::TensorLookup& lookup, const char* what);

// The Strategy the registry has under job.strategy's type; ConfigError for one
// that is not built yet, that needs a cluster and has none, or that cannot scale
// the loss when loss scaling is on (central_storage, parameter_server).
std::unique_ptr<Strategy> make_strategy(const StrategyJob& job, const StrategyContext& context = {});

}  // namespace dtrain::strategy
