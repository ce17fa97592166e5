// Implementation of zero_shard.h.
#include "strategy/sync/zero_shard.h"

#include "optim/clipping.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/ops.h"
#include "strategy/sync/gradient_reducer.h"

namespace dtrain::strategy {
namespace {

// Elements from `base`'s first element to `t`'s (both in one storage).
int64_t offset_in(const Tensor& t, const Tensor& base) {
  DT_CHECK(t.shares_storage(base), "a trainable tensor outside the model's arena");
  return (static_cast<const char*>(t.raw()) - static_cast<const char*>(base.raw())) /
         static_cast<int64_t>(sizeof(float));
}

}  // namespace

void ZeroShard::check_supported(const StrategyJob& job, int local_replicas) {
  const std::string& path = job.strategy.path;
  if (local_replicas > 1)
    throw ConfigError(str(path, ".shard_optimizer_state: ZeRO sharding takes one replica per task, and this job has ",
                          local_replicas, " (", path, ".replicas); drop `replicas` and run more tasks instead "
                          "(`dtrain launch --workers N`), or set shard_optimizer_state to false"));
  if (job.strategy.allreduce_dtype == AllreduceDType::kBfloat16)
    throw ConfigError(str(path, ".allreduce_dtype: 'bfloat16' is not supported with shard_optimizer_state (the "
                          "gradients are reduce-scattered in float32); use \"float32\""));
  if (job.strategy.communication == Communication::kNccl)
    throw ConfigError(str(path, ".communication: 'nccl' is not supported with shard_optimizer_state yet (its "
                          "reduce-scatter and all-gather go through Gloo, in host memory); use \"auto\" or \"ring\""));
}

optim::OptimizerSpec ZeroShard::optimizer_spec(optim::OptimizerSpec spec) { return optim::without_norm_clipping(spec); }

ZeroShard::ZeroShard(const std::vector<nn::Param*>& params, comm::Communicator& workers,
                     const optim::OptimizerSpec& spec, optim::Optimizer& optimizer)
    : workers_(workers), params_(params), clipnorm_(spec.clipnorm), global_clipnorm_(spec.global_clipnorm) {
  DT_CHECK(!params.empty(), "ZeRO sharding of a model without trainable params");
  values_ = Tensor::span(params.front()->value, params.back()->value);
  grads_ = Tensor::span(params.front()->grad, params.back()->grad);
  flat_ = values_.numel();
  DT_CHECK_EQ(grads_.numel(), flat_);
  // The values and the grads must be one flat range each, with one layout: element
  // i of the gradient range is the gradient of element i of the value range.
  std::vector<int64_t> offsets;
  for (const nn::Param* p : params) {
    const int64_t at = offset_in(p->value, values_);
    DT_CHECK(at == offset_in(p->grad, grads_), "the gradients of ", p->name, " lie elsewhere than its values");
    DT_CHECK(offsets.empty() || at >= offsets.back() + params[offsets.size() - 1]->value.numel(),
             "the trainable values are not in model order in the arena");
    offsets.push_back(at);
  }
  const int n = workers.size();
  chunk_ = static_cast<int64_t>(comm::padded_count(static_cast<size_t>(flat_), n)) / n;
  lo_ = std::min<int64_t>(flat_, chunk_ * workers.rank());
  hi_ = std::min<int64_t>(flat_, lo_ + chunk_);
  for (size_t i = 0; i < params.size(); ++i) {
    const nn::Param* p = params[i];
    const int64_t begin = std::max(lo_, offsets[i]), end = std::min(hi_, offsets[i] + p->value.numel());
    if (end <= begin) continue;
    const int64_t at = begin - offsets[i];
    pieces_.push_back({p->name, p->value.flat_slice(at, end - begin), p->grad.flat_slice(at, end - begin)});
    piece_of_.push_back({i, at});
  }
  for (nn::Param& piece : pieces_) piece_pointers_.push_back(&piece);
  int64_t floats = 0;
  for (const nn::Param& piece : pieces_) floats += TensorArena::padded(piece.value.numel());
  floats *= optimizer.slots_per_param();
  if (floats > 0) slots_ = std::make_unique<TensorArena>(params.front()->value.device(), floats);
  optimizer.create_state(piece_pointers_, slots_.get());
  whole_.assign(static_cast<size_t>(chunk_ * n), 0.0f);
  mine_.assign(static_cast<size_t>(chunk_), 0.0f);
}

void ZeroShard::ride_along(size_t count, std::function<void(float* values)> fill) {
  DT_CHECK(!fill_extras_ && count > 0, "ride_along is set once");
  count_ = count;
  fill_extras_ = std::move(fill);
}

bool ZeroShard::all_finite() {
  DT_CHECK(track_non_finite_, "all_finite without track_non_finite");
  return extras_[count_] <= 0.0f;  // every task's count, summed
}

double ZeroShard::finish_backward() {
  const bool one = workers_.size() == 1;  // the local gradients are the mean already
  non_finite_ = 0;
  if (!one || track_non_finite_) {
    // A copy from a GPU waits for the backward ops issued so far (as the reducer's packing does).
    grads_.copy_to_host(whole_.data());
    std::fill(whole_.begin() + flat_, whole_.end(), 0.0f);  // the padding past G
    if (track_non_finite_) non_finite_ = count_non_finite(whole_.data(), static_cast<size_t>(flat_));
  }
  extras_.assign(count_ + (track_non_finite_ ? 1 : 0), 0.0f);
  if (fill_extras_) fill_extras_(extras_.data());
  if (track_non_finite_) extras_[count_] = static_cast<float>(non_finite_);
  if (one) return 0.0;
  const trace::Span span("reduce-scatter", "comm");
  Stopwatch waited;
  // The loss sums, stop flag and non-finite count: one small all-reduce of their
  // own (a reduce-scatter leaves each task only its own slice of anything in it).
  if (!extras_.empty()) workers_.all_reduce(extras_.data(), extras_.size(), comm::ReduceOp::kSum);
  workers_.reduce_scatter(whole_.data(), static_cast<size_t>(chunk_), mine_.data(), comm::ReduceOp::kMean);
  // On a GPU the copy is issued on the compute stream, before the optimizer's update.
  if (hi_ > lo_) grads_.flat_slice(lo_, hi_ - lo_).copy_from_host(mine_.data());
  return waited.seconds();
}

void ZeroShard::clip_norms() {
  clip_pieces_by_norm(piece_pointers_, piece_of_, params_.size(), workers_, clipnorm_, global_clipnorm_);
}

double ZeroShard::gather_values() {
  if (workers_.size() == 1) return 0.0;  // the one slice is the whole range
  // Waits on a GPU for the optimizer's update of the slice.
  if (hi_ > lo_) values_.flat_slice(lo_, hi_ - lo_).copy_to_host(mine_.data());
  std::fill(mine_.begin() + (hi_ - lo_), mine_.end(), 0.0f);  // past G: the padding
  const trace::Span span("all-gather", "comm");
  Stopwatch waited;
  workers_.all_gather(mine_.data(), static_cast<size_t>(chunk_), whole_.data());
  values_.copy_from_host(whole_.data());
  return waited.seconds();
}

std::vector<StatePiece> ZeroShard::slot_pieces(optim::Optimizer& optimizer) const {
  return pieces_of(optimizer.state(), piece_of_, params_, true);
}

void ZeroShard::load_slots(optim::Optimizer& optimizer, const Strategy::TensorLookup& lookup) const {
  load_pieces(optimizer.state(), piece_of_, params_, lookup, "optimizer state");
}

}  // namespace dtrain::strategy
