// PipelineStrategy: the model's layers cut into stages, one stage per training
// task (strategy.type "pipeline"), as torch.distributed.pipelining and DeepSpeed's
// PipelineModule do it, from the job file.
//
// Tasks: S stages x R copies (strategy.data_parallel); training task t holds
// stage t % S of copy t / S, so consecutive tasks form one pipeline. Every stage
// of a copy reads the same records (same seed, same shard: the copy's): the first
// stage feeds their images in, the last takes their labels for the loss.
//
// With strategy.tensor_parallel T, each stage is held by T neighbouring tasks
// (parallel_grid.h: rank = (copy x S + stage) x T + part) that split its layers
// as tensor_parallel.h does (a Dense pair cut by a stage boundary stays whole),
// over the stage's tensor group. Each stage's output is whole on each of its T
// tasks, so part p of stage s sends to part p of stage s + 1 (the pipeline
// groups are per part), and the copies' all-reduce is among the tasks holding
// the same part of the same stage. A split output layer's logits go to the
// vocabulary-parallel loss on the last stage; only part 0 of the last stage
// counts the loss. Checkpoints and the hash hold whole tensors, as for
// tensor_parallel under multi_worker_mirrored.
//
// A step cuts the replica's batch into M micro-batches (strategy.micro_batches;
// with gradient accumulation K, each of the K batches into M). Activations go
// forward and their gradients backward point-to-point between neighbouring stages
// (StageLinks, pipeline_links.h: Gloo send/recv on the copy's group, tagged by
// step, micro-batch and direction, or NCCL send/recv on device buffers when every
// stage of the copy has a GPU of its own; no stage blocks on a send, each receive
// waits at most the communicator's deadline). The order of a stage's
// forwards (F) and backwards (B) is the schedule's: gpipe, all F then all B;
// 1f1b, S - s - 1 warm-up forwards on stage s, then F and B in turn, then the
// remaining B (at most S - s micro-batches in flight on stage s). The gradients
// are summed over the micro-batches in micro-batch order, exactly as one_device
// sums the micro-batches of gradient accumulation, then averaged over the R
// copies of the stage (an all-reduce among the tasks holding it) and applied
// once: a step equals the unpipelined step on the whole batch. Norm clipping
// (clipnorm, global_clipnorm) takes its norms over the whole model: global_clipnorm's
// over every stage's gradients (one all-reduce of one float over the copy's stages).
//
// dtrain's layers keep one forward pass's state for their backward. So a stage
// keeps the inputs of its micro-batches in flight, and before the backward of
// a micro-batch whose forward is no longer the layers' latest it runs that
// forward again (GPipe's re-materialisation; non-trainable state such as batch
// normalization's moving statistics is put back afterwards, so it is updated
// once per micro-batch). Under 1f1b the last stage never recomputes.
// Batch normalization computes its statistics per micro-batch (PyTorch's and
// DeepSpeed's pipelines do too).
//
// The loss, accuracy and the stop flag travel in one all-reduce over all tasks
// after each step (only last stages contribute). Under dynamic loss scaling
// (mixed_float16) the last stage scales the loss gradient, and each stage's count
// of non-finite gradients travels in the same all-reduce: every task skips the
// same steps and keeps the same scale. Checkpoints are sharded: each
// stage of copy 0 writes its layers and their optimizer slots
// (Strategy::state_pieces); the names are the whole model's, so the checkpoint
// loads as one model (ckpt export, one_device resume) and a pipeline resumes
// from any checkpoint of the same model. On the CPU or one GPU per stage (the
// CUDA backend); the small collectives (metrics, evaluation figures, the copies'
// gradient all-reduce) stay on Gloo.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strategy/sync/gradient_sync.h"
#include "strategy/parallel/grid_groups.h"
#include "strategy/planning/parallel_grid.h"
#include "strategy/planning/pipeline_stages.h"
#include "strategy/strategy.h"
#include "strategy/sync/update_step.h"
#include "tensor/memory_scope.h"

namespace dtrain::strategy {

class StageLinks;  // pipeline_links.h
class TensorParallel;  // tensor_parallel.h
class VocabularyParallelLoss;  // vocabulary_loss.h

// The idle share of an ideal pipeline of equal stages: (S - 1) / (M + S - 1).
double theoretical_bubble(int stages, int64_t micro_batches);

// What a pipeline step measured (for the summary and `dtrain bench pipeline`).
struct PipelineStats {
  int stage = 0, stages = 1, copy = 0, copies = 1;
  int tensor = 0, tensors = 1;  // this task's part of the stage's split layers (strategy.tensor_parallel)
  std::string tensor_split;     // describe_tensor_split of the whole model's plan; "" without tensor_parallel
  std::string split;           // the layers of each stage, "conv2d..flatten | dense..dense_1"
  std::string split_how;       // "strategy.stages", "auto: measured time", "auto: parameter bytes"
  std::string links;           // how activations travel: "gloo", "gloo (host copies)", "nccl"
  double busy_seconds = 0.0;   // forwards, backwards (recomputation included) and the loss on this stage
  double step_seconds = 0.0;   // whole steps
  int64_t recomputed = 0;      // forwards run again before a backward
  int64_t peak_inputs_held = 0;     // micro-batch inputs held at once on this stage
  int64_t peak_input_bytes = 0;     // their bytes at that peak
  // Measured (tensor/memory_scope.h): the most bytes of tensors on this stage's
  // device that its training steps held at once: the activations the layers keep,
  // the micro-batch inputs held, messages in flight, input gradients, the ops'
  // temporaries (parameters, gradients and optimizer state are not in it).
  int64_t peak_activation_bytes = 0;
};

class PipelineStrategy : public Strategy {
 public:
  PipelineStrategy(const StrategyJob& job, const StrategyContext& context);
  ~PipelineStrategy() override;

  std::string name() const override { return "pipeline"; }
  int num_replicas_in_sync() const override { return stats_.copies; }
  int local_replicas() const override { return 1; }
  void train_step(const std::vector<data::Batch>& micro_batches, int64_t step, nn::LossStats& stats,
                  const std::vector<data::Batch>* upcoming) override;
  void eval_step(const data::Batch& batch, nn::LossStats& stats) override;
  void sync_state() override;
  void request_stop() override { stop_requested_ = true; }
  bool stop_agreed() const override { return stop_agreed_; }
  void load_state(const TensorLookup& model, const TensorLookup& optimizer) override;
  nn::Sequential& model() override { return *model_; }
  optim::Optimizer& optimizer() override { return *optimizer_; }
  optim::DynamicLossScale* loss_scale() override { return loss_scale_.get(); }
  StepTimings timings() const override { return timings_; }
  bool sharded_state() const override { return true; }
  std::vector<StatePiece> state_pieces() override;
  std::string params_sha256() override;
  DataShard data_shard() const override { return {stats_.copy, stats_.copies}; }
  ModelShapes model_shapes() override { return shapes_; }
  std::string report_json() const override;

  const PipelineStats& pipeline_stats() const { return stats_; }
  bool first_stage() const { return stats_.stage == 0; }
  bool last_stage() const { return stats_.stage + 1 == stats_.stages; }

 private:
  struct Op {
    bool forward;
    int64_t micro;
  };
  std::vector<Op> schedule(int64_t micro_batches) const;
  // Receives `rows` samples of this stage's input (stage > 0) or output gradient.
  Tensor receive(int64_t rows, const Shape& sample, int peer, uint64_t tag);
  // Picks and connects the links to the neighbouring stages (collective over the copy).
  void connect_links(const StrategyContext& context);
  // With tensor_parallel: the stage's tensor group, and its layers split over it.
  void split_tensors(const StrategyJob& job, const StageSplit& split, comm::Communicator& group);
  // The last stage's loss on `out` (the vocabulary-parallel one for split logits).
  void compute_loss(const Tensor& out, const Tensor& labels, Tensor* grad, float scale, nn::LossRows& rows);
  // What nn::Sequential::hash_input feeds for this stage, with whole tensors
  // (collective over the tensor group).
  std::string stage_hash_input();

  StrategySpec spec_;
  uint64_t seed_;
  PipelineSchedule schedule_;
  int64_t micro_batches_;
  Device device_;
  comm::Communicator* workers_;
  ParallelGrid grid_;  // copies x stages x tensor parts over the training tasks
  std::optional<GridGroups> own_grid_;  // the grid's groups where this strategy made them (no runtime's)
  std::unique_ptr<comm::Communicator> pipe_;   // this copy's stages, rank = stage
  std::unique_ptr<comm::Communicator> peers_;  // the copies' tasks holding this stage (and part), rank = copy
  std::unique_ptr<comm::Communicator> tensor_group_;  // this stage's tasks of this copy, rank = part (tensor_parallel)
  std::unique_ptr<TensorParallel> tp_;
  std::unique_ptr<VocabularyParallelLoss> vocabulary_loss_;  // the last stage, when the output's logits are split
  std::unique_ptr<StageLinks> own_links_;  // host links over pipe_ (unless the runtime gave NCCL links)
  StageLinks* links_ = nullptr;           // own_links_, or StrategyContext::stage_links
  std::unique_ptr<nn::Sequential> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<nn::Loss> loss_;
  std::unique_ptr<optim::DynamicLossScale> loss_scale_;  // mixed_float16 (or a test's loss_scaling)
  std::vector<nn::Param*> trainable_, state_;
  std::vector<Tensor> accumulated_;  // gradient sums over a step's micro-batches
  std::vector<std::vector<size_t>> layer_params_;  // each layer's trainable params, as places in trainable_
  // The plan's gradient path (gradient_sync.h): several copies average their
  // gradients in buckets over peers_ as the last micro-batch's backward produces
  // them (overlapped; the bucketed all-reduce data parallelism uses; on GPUs
  // through host copies), one copy applies them as they are.
  std::unique_ptr<GradientSync> sync_;
  // Unscale or skip, clip, apply (update_step.h). Keras' clipnorm / global_clipnorm
  // are clip_split_by_norm's where a norm spans more than this stage's whole
  // tensors (a split tensor's parts; global_clipnorm: every stage).
  std::optional<UpdateStep> update_step_;
  ModelShapes shapes_;
  Shape stage_input_, stage_output_;  // per sample
  PipelineStats stats_;
  MemoryScope step_memory_;  // the tensors the training steps allocate
  StepTimings timings_;
  uint64_t eval_calls_ = 0, hash_calls_ = 0;
  bool stop_requested_ = false, stop_agreed_ = false;
};

}  // namespace dtrain::strategy
