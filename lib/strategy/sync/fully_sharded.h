// FullShard: ZeRO stages 2 and 3 (strategy.shard "gradients" / "parameters",
// PyTorch FSDP's SHARD_GRAD_OP and FULL_SHARD) for a task's single replica under
// multi_worker_mirrored: each of the N tasks keeps 1/N of the gradients (stage 2)
// and of the parameters too (stage 3), besides 1/N of the optimizer slots.
//
// Units. Each top-level layer with trainable parameters is a unit (a
// TransformerDecoder block is one, as FSDP wraps each block), or with
// `min_unit_params` consecutive such layers make one until it holds at least
// that many trainable parameters (FSDP's size-based wrap: fewer collectives for
// small layers). A unit's values lie in one flat range of the model's arena, and
// its gradients in another with the same layout (nn::Sequential::place). A unit of L floats is cut into N chunks of
// ceil(L / N); task r owns chunk r. The task's own chunks of every unit live in
// two compact buffers of its own, shard values and shard gradients (about 1/N of
// the model each); the optimizer updates pieces of them, one per trainable
// tensor a chunk touches, with slots for those elements only.
//
// Whole units live only while in use, in a few buffers of the largest unit's
// size that the units take turns in (FSDP's caching allocator does the same for
// its gathered flat parameters): a unit's params are pointed at a buffer (their
// value or grad tensors become views of it, in the arena's layout) while it is
// whole, and back at the arena after. The arena's trainable ranges (stage 3) or
// gradient range (both stages) are handed back to the system at the start
// (madvise MADV_DONTNEED) and not touched again, so they take no memory.
//   - backward: each unit's gradients are written into one of two gradient
//     buffers, in turn; as its backward ends they are reduce-scattered (mean over
//     the tasks) and added into the shard gradients; a buffer is written again
//     only once its last reduce-scatter has read it;
//   - stage 3, forward and backward: a unit's values are all-gathered from every
//     task's chunk into a free value buffer just before it runs, and the buffer
//     is free again after (the last unit keeps its from its forward to its
//     backward); with `prefetch`, the next unit's gather is queued before this
//     one computes;
//   - stage 2: the values stay whole in the arena; after the update every unit
//     is gathered there.
// with_whole_model gathers every unit into the arena itself, and frees it after.
// The collectives run on one thread of their own (a WorkQueue), in the order
// they were queued, the same on every task; the step waits for them before the
// optimizer (finish_backward). Gradient accumulation reduce-scatters every
// micro-batch and sums into the shard gradients (DeepSpeed's way under ZeRO-2).
//
// Non-trainable state (batch-norm statistics) stays whole on every task.
// Host memory only (a GPU's memory cannot be freed page by page like this), one
// replica per task, float32 (check_supported).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/work_queue.h"
#include "nn/sequential.h"
#include "optim/optimizer.h"
#include "strategy/sync/gradient_sync.h"
#include "strategy/sync/shard_pieces.h"
#include "strategy/strategy.h"
#include "tensor/arena.h"

namespace dtrain::strategy {

class FullShard : public GradientSync {
 public:
  // `model`: placed (nn::Sequential::place) with no optimizer slots in the arena.
  // Keeps this task's chunks, creates `optimizer`'s slots for pieces(), frees the
  // rest and installs the model's hooks. `spec`'s norm clipping is done here
  // (make the optimizer with ZeroShard::optimizer_spec).
  FullShard(nn::Sequential& model, comm::Communicator& workers, const optim::OptimizerSpec& spec,
            optim::Optimizer& optimizer, ShardMode mode, bool prefetch, int64_t min_unit_params = 0);
  ~FullShard();
  FullShard(const FullShard&) = delete;
  FullShard& operator=(const FullShard&) = delete;

  // ConfigError (with a fix) for what stages 2 and 3 do not do yet: several
  // replicas per task, a GPU, mixed precision, bfloat16 gradients, NCCL.
  static void check_supported(const StrategyJob& job, int local_replicas, const Device& device);

  // The pieces this task updates (the optimizer's params), in model order.
  const std::vector<nn::Param*>& pieces() const override { return piece_pointers_; }
  // The layers' hooks add each backward's gradients into this task's chunks.
  bool sums_micro_batches() const override { return true; }
  // (check_supported refuses loss scaling: the step is never skipped)
  bool all_finite() override { return true; }

  // After the step's last backward: waits for the queued reduce-scatters (and
  // gathers). Returns the seconds the step waited for collectives since the
  // last call (here and in the layers' hooks).
  double finish_backward() override;
  // clipnorm / global_clipnorm over every task's pieces. Collective.
  void clip_norms() override;
  // After the optimizer's update (or a skipped one): the shard gradients start
  // again from zero; stage 2 gathers every unit's new values, stage 3 drops any
  // gathered one. Returns the seconds spent in collectives.
  double after_update(bool applied) override;

  // Checkpoint pieces: this task's chunks of the trainable tensors and of their
  // slots (the non-trainable state is not here).
  std::vector<StatePiece> state_pieces(optim::Optimizer& optimizer) const;
  // This task's chunks of the whole tensors `model` and `optimizer` find.
  void load(const Strategy::TensorLookup& model, const Strategy::TensorLookup& optimizer,
            optim::Optimizer& optimizer_of_pieces);
  // Runs `use` while the model's arena holds every unit's values (stage 3
  // gathers them for it, then frees them). Collective.
  void with_whole_model(const std::function<void()>& use);

  // The units, for logs and tests.
  size_t units() const { return units_.size(); }

 private:
  struct Unit {
    size_t first_layer = 0, last_layer = 0;  // its top-level layers (with trainable params)
    size_t first_param = 0, end_param = 0;  // its params: params_[first_param, end_param)
    int64_t begin = 0;       // its range [begin, begin + length) of the arena's values and grads
    int64_t length = 0;
    int64_t chunk = 0;       // ceil(length / N)
    int64_t shard_at = 0;    // where its chunk lies in the shard buffers
    uint64_t gathered = 0;   // stage 3: the ticket of its gather while its values are whole (0: not)
    int buffer = -1;         // stage 3: the value buffer it is whole in (-1: the arena, or nowhere)
    int grad_buffer = 0;     // the gradient buffer its last backward wrote
  };

  void install_hooks();
  // Stage 3: queues the all-gather of unit u's values into a free value buffer,
  // and points its params there (not while it is whole).
  void gather(size_t u);
  void wait_gathered(size_t u);
  // Unit u's params' values (or grads) as views of `base`, in the arena's layout.
  void point_params(size_t u, const Tensor& base, bool grads);
  // Queues the all-gather of unit u's values into the arena (stage 2, with_whole_model).
  uint64_t gather_into_arena(size_t u);
  // Before unit u's backward: its gradients go to the next gradient buffer, once
  // that buffer's last reduce-scatter has read it.
  void take_grad_buffer(size_t u);
  // Queues the reduce-scatter of unit u's gradients into the shard gradients.
  void reduce_scatter(size_t u);
  // Stage 3: unit u's buffer is free again; its params point at the arena.
  void free_values(size_t u);
  // Floats a buffer holds: the largest unit, N chunks of it.
  int64_t buffer_floats() const { return max_chunk_ * workers_.size(); }
  // The unit of top-level layer i, or -1 for a layer without trainable params.
  int unit_of(size_t layer) const { return unit_of_layer_[layer]; }
  // The next unit after u (step +1) or before it (-1) that exists, or -1.
  int neighbour(size_t u, int step) const;

  nn::Sequential& model_;
  comm::Communicator& workers_;
  const bool stage3_;
  const bool prefetch_;
  std::vector<nn::Param*> params_;  // the model's trainable params
  float* values_ = nullptr;         // the arena's flat ranges
  float* grads_ = nullptr;
  std::vector<Tensor> arena_values_, arena_grads_;  // each param's own tensors in the arena
  std::vector<int64_t> offsets_;                    // and where they lie in its ranges
  std::vector<Unit> units_;
  std::vector<int> unit_of_layer_;
  Tensor shard_values_, shard_grads_;
  int64_t shard_floats_ = 0;
  std::vector<nn::Param> pieces_;
  std::vector<nn::Param*> piece_pointers_;
  std::vector<PieceOf> piece_of_;  // of params_
  std::unique_ptr<TensorArena> slots_;
  int64_t max_chunk_ = 0;
  std::vector<Tensor> value_buffers_;  // stage 3: the value buffers made so far (a few)
  std::vector<int> free_value_buffers_;
  Tensor grad_buffers_[2];
  uint64_t grad_tickets_[2] = {0, 0};  // each gradient buffer's last reduce-scatter
  int next_grad_buffer_ = 0;
  std::vector<float> buffer_;  // a gather into the arena of a unit N does not divide (made when needed)
  std::vector<float> mine_;    // a reduce-scatter's chunk, on the queue's thread
  double clipnorm_ = 0.0, global_clipnorm_ = 0.0;
  double waited_ = 0.0;        // seconds the step waited for the queue, since finish_backward
  std::unique_ptr<WorkQueue> queue_;
};

}  // namespace dtrain::strategy
