// ZeroShard: ZeRO stage 1 (strategy.shard_optimizer_state) for a task's single
// replica under multi_worker_mirrored: the optimizer state is split 1/N over the
// N training tasks.
//
// The model's trainable values lie in one flat range of its arena, and their
// gradients in another with the same layout (nn::Sequential::place: each tensor
// padded to TensorArena::kAlignFloats; the padding stays zero). That flat range of
// G floats, padded to a multiple of N (padded_count), is cut into N equal slices;
// task r owns [r * chunk, (r + 1) * chunk). A step:
//   1. the whole local gradient goes to a host buffer (inf/NaN counted there under
//      loss scaling); a few values ride along in a small all-reduce of their own
//      (the loss sums, the stop flag, the non-finite count);
//   2. reduce_scatter (mean): this task receives the job's mean gradient of its
//      slice, copied into the slice of the gradient range;
//   3. the optimizer updates pieces(): one Param per trainable tensor that the
//      slice touches, its value and grad 1-D views of the elements inside the
//      slice, so it creates slots for those elements only (1/N of the state);
//   4. all_gather: every task's updated slice of the values, into the whole range.
// The optimizers are element-wise, so the pieces' updates equal the whole
// tensors'. Norm clipping is not: clip_norms() takes each param's sum of squares
// over the tasks (an all-reduce of one float per param) and clips the pieces with
// it; the optimizer itself is made without norm clipping (optimizer_spec()).
// Everything here is collective over `workers` except the constructor's layout.
// The collectives go through host memory (Gloo) even for a GPU replica: NCCL's
// device path (communication "nccl") is refused; "auto" uses `workers`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "nn/layer.h"
#include "optim/optimizer.h"
#include "strategy/sync/gradient_sync.h"
#include "strategy/sync/shard_pieces.h"
#include "strategy/strategy.h"
#include "tensor/arena.h"

namespace dtrain::strategy {

class ZeroShard : public GradientSync {
 public:
  // `params`: the model's trainable params, placed (nn::Sequential::place) with
  // no optimizer slots in the arena. Creates `optimizer`'s slots for pieces().
  ZeroShard(const std::vector<nn::Param*>& params, comm::Communicator& workers, const optim::OptimizerSpec& spec,
            optim::Optimizer& optimizer);
  ZeroShard(const ZeroShard&) = delete;
  ZeroShard& operator=(const ZeroShard&) = delete;

  // ConfigError (with a fix) for what ZeRO sharding does not do yet: several
  // replicas per task, bfloat16 gradients, NCCL (communication "nccl").
  static void check_supported(const StrategyJob& job, int local_replicas);
  // `spec` as the sharded optimizer takes it: clipnorm and global_clipnorm off
  // (clip_norms() does them across the tasks); clipvalue is element-wise and stays.
  static optim::OptimizerSpec optimizer_spec(optim::OptimizerSpec spec);

  // The pieces this task updates (the optimizer's params), in model order.
  const std::vector<nn::Param*>& pieces() const override { return piece_pointers_; }
  // This task's slice of the flat (padded) range, and that range's length.
  int64_t slice_begin() const { return lo_; }
  int64_t slice_end() const { return hi_; }
  int64_t flat_size() const { return flat_; }

  // The caller's values (and, under loss scaling, the count of non-finite
  // gradient values) take one small all-reduce of their own in finish_backward():
  // a reduce-scatter leaves each task only its own slice of anything in it.
  bool carries_sums() const override { return true; }
  void ride_along(size_t count, std::function<void(float* values)> fill) override;
  std::span<const float> extras() const override { return {extras_.data(), count_}; }
  void track_non_finite() override { track_non_finite_ = true; }
  bool all_finite() override;

  // Steps 1 and 2: after backward, this task's slice of the gradients becomes the
  // job's mean. Returns the seconds spent in the collectives.
  double finish_backward() override;
  // clipnorm / global_clipnorm of the job's spec on the pieces' gradients, with
  // each param's norm over every task's pieces. Collective; nothing without them.
  void clip_norms() override;
  // Step 4 (after an applied update): every task's slice of the values into the
  // whole range. Returns the seconds spent.
  double after_update(bool applied) override { return applied ? gather_values() : 0.0; }

  // The optimizer's slots as checkpoint pieces: each with its whole tensor's
  // name and shape and its offset inside it.
  std::vector<StatePiece> slot_pieces(optim::Optimizer& optimizer) const;
  // Copies this task's slice of each whole slot tensor `lookup` finds into the
  // optimizer's slots. A tensor of the piece's own shape is taken as the piece
  // itself (restore_best_weights hands back the optimizer's current state).
  void load_slots(optim::Optimizer& optimizer, const Strategy::TensorLookup& lookup) const;

 private:
  comm::Communicator& workers_;
  std::vector<nn::Param*> params_;
  Tensor values_, grads_;  // the flat ranges of the arena (G floats each)
  int64_t flat_ = 0;       // G
  int64_t chunk_ = 0;      // padded_count(G, N) / N
  int64_t lo_ = 0, hi_ = 0;  // this task's slice [lo, hi), hi clamped to G
  std::vector<nn::Param> pieces_;
  std::vector<nn::Param*> piece_pointers_;
  std::vector<PieceOf> piece_of_;  // of params_
  std::unique_ptr<TensorArena> slots_;  // the optimizer's slots for the pieces
  std::vector<float> whole_;  // N * chunk: the gradients to reduce-scatter, then the gathered values
  std::vector<float> mine_;   // chunk: this task's reduced gradients, then its values
  double clipnorm_ = 0.0, global_clipnorm_ = 0.0;
  double gather_values();

  std::function<void(float*)> fill_extras_;
  size_t count_ = 0;           // the caller's values riding along
  std::vector<float> extras_;  // theirs, then the non-finite count (loss scaling)
  bool track_non_finite_ = false;
  size_t non_finite_ = 0;
};

}  // namespace dtrain::strategy
