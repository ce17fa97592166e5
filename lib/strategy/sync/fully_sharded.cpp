// Implementation of fully_sharded.h.
#include "strategy/sync/fully_sharded.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "strategy/registry.h"

namespace dtrain::strategy {
namespace {

// Hands the whole pages inside [data, data + count) back to the system: they
// read zero when touched again. The pages at either end, shared with what lies
// beside the range, stay. (If the system refuses, the range keeps its memory;
// nothing here relies on freed values reading zero.)
void free_pages(float* data, int64_t count) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(data + count) / page * page;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// Makes the whole pages inside [data, data + count) resident and writable in
// one call (MADV_POPULATE_WRITE, Linux 5.14), instead of a fault per page as a
// copy into freed pages takes. Where the system has no such call, the copy
// faults them in as before.
void populate_pages(float* data, int64_t count) {
#ifdef MADV_POPULATE_WRITE
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(data + count) / page * page;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)data, (void)count;
#endif
}

int64_t offset_in(const nn::Param& p, const float* values, const float* grads) {
  const int64_t at = p.value.data() - values;
  DT_CHECK(at == p.grad.data() - grads, "the gradients of ", p.name, " lie elsewhere than its values");
  return at;
}

}  // namespace

void FullShard::check_supported(const StrategyJob& job, int local_replicas, const Device& device) {
  const std::string path = job.strategy.path + ".shard";
  const std::string mode = str("\"", shard_mode_name(job.strategy.shard), "\"");
  if (local_replicas > 1)
    throw ConfigError(str(path, ": ", mode, " takes one replica per task, and this job has ", local_replicas, " (",
                          job.strategy.path, ".replicas); drop `replicas` and run more tasks instead "
                          "(`dtrain launch --workers N`)"));
  if (!device.is_cpu())
    throw ConfigError(str(path, ": ", mode, " runs on the CPU so far (it frees a layer's memory page by page, "
                          "which a GPU's allocations cannot); set \"device\": \"cpu\", or use shard "
                          "\"optimizer_state\" on GPUs"));
  if (job.model.compute_dtype != DType::kF32)
    throw ConfigError(str(path, ": ", mode, " trains in float32 so far; set train.precision to \"float32\", or use "
                          "shard \"optimizer_state\""));
  if (job.strategy.allreduce_dtype == AllreduceDType::kBfloat16)
    throw ConfigError(str(job.strategy.path, ".allreduce_dtype: 'bfloat16' is not supported with shard ", mode,
                          " (the gradients are reduce-scattered in float32); use \"float32\""));
  if (job.strategy.communication == Communication::kNccl)
    throw ConfigError(str(job.strategy.path, ".communication: 'nccl' is not supported with shard ", mode,
                          " (its collectives go through Gloo, in host memory); use \"auto\" or \"ring\""));
}

FullShard::FullShard(nn::Sequential& model, comm::Communicator& workers, const optim::OptimizerSpec& spec,
                     optim::Optimizer& optimizer, ShardMode mode, bool prefetch, int64_t min_unit_params)
    : model_(model),
      workers_(workers),
      stage3_(mode == ShardMode::kParameters),
      prefetch_(prefetch && mode == ShardMode::kParameters),
      params_(model.trainable_params()),
      clipnorm_(spec.clipnorm),
      global_clipnorm_(spec.global_clipnorm) {
  DT_CHECK(mode == ShardMode::kGradients || mode == ShardMode::kParameters, "FullShard is ZeRO stage 2 or 3");
  DT_CHECK(!params_.empty(), "ZeRO sharding of a model without trainable params");
  Tensor values = Tensor::span(params_.front()->value, params_.back()->value);
  Tensor grads = Tensor::span(params_.front()->grad, params_.back()->grad);
  DT_CHECK(values.device().is_cpu(), "FullShard holds a host model");
  values_ = values.data();
  grads_ = grads.data();
  const int64_t flat = values.numel();
  const int n = workers.size(), rank = workers.rank();
  // The units: the trainable params of each top-level layer (of consecutive
  // ones until min_unit_params of them), consecutive in the arena.
  unit_of_layer_.assign(model.layers().size(), -1);
  size_t next = 0;
  int64_t open = 0;  // the last unit's parameters while it is below min_unit_params; -1: closed
  for (size_t i = 0; i < model.layers().size(); ++i) {
    size_t count = 0;
    int64_t elements = 0;
    for (const nn::Param* p : model.layers()[i]->params())
      if (p->trainable()) {
        ++count;
        elements += p->value.numel();
      }
    if (count == 0) continue;
    if (units_.empty() || open < 0) {
      units_.push_back({i, i, next, next + count, offset_in(*params_[next], values_, grads_)});
      open = 0;
    } else {
      units_.back().last_layer = i;
      units_.back().end_param = next + count;
    }
    unit_of_layer_[i] = static_cast<int>(units_.size()) - 1;
    open += elements;
    if (open >= min_unit_params) open = -1;
    next += count;
  }
  DT_CHECK_EQ(next, params_.size());
  for (const nn::Param* p : params_) {
    arena_values_.push_back(p->value);
    arena_grads_.push_back(p->grad);
    offsets_.push_back(offset_in(*p, values_, grads_));
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    Unit& unit = units_[u];
    unit.length = (u + 1 < units_.size() ? units_[u + 1].begin : flat) - unit.begin;
    DT_CHECK(unit.length > 0, "the layers' trainable values are not in model order in the arena");
    unit.chunk = (unit.length + n - 1) / n;
    unit.shard_at = shard_floats_;
    shard_floats_ += unit.chunk;
    max_chunk_ = std::max(max_chunk_, unit.chunk);
  }
  shard_values_ = Tensor({shard_floats_});
  shard_grads_ = Tensor({shard_floats_});
  // This task's chunk of each unit, and the pieces of the params inside it.
  for (size_t u = 0; u < units_.size(); ++u) {
    const Unit& unit = units_[u];
    const int64_t lo = std::min(unit.begin + unit.length, unit.begin + rank * unit.chunk);
    const int64_t hi = std::min(unit.begin + unit.length, lo + unit.chunk);
    std::copy(values_ + lo, values_ + hi, shard_values_.data() + unit.shard_at);
    for (size_t k = unit.first_param; k < unit.end_param; ++k) {
      const nn::Param& p = *params_[k];
      const int64_t at = offset_in(p, values_, grads_);
      const int64_t begin = std::max(lo, at), end = std::min(hi, at + p.value.numel());
      if (end <= begin) continue;
      const int64_t in_shard = unit.shard_at + (begin - lo);
      pieces_.push_back({p.name, shard_values_.flat_slice(in_shard, end - begin),
                         shard_grads_.flat_slice(in_shard, end - begin)});
      piece_of_.push_back({k, begin - at});
    }
  }
  for (nn::Param& piece : pieces_) piece_pointers_.push_back(&piece);
  int64_t floats = 0;
  for (const nn::Param& piece : pieces_) floats += TensorArena::padded(piece.value.numel());
  floats *= optimizer.slots_per_param();
  if (floats > 0) slots_ = std::make_unique<TensorArena>(Device::cpu(), floats);
  optimizer.create_state(piece_pointers_, slots_.get());
  for (Tensor& buffer : grad_buffers_) buffer = Tensor({buffer_floats()});
  mine_.assign(static_cast<size_t>(max_chunk_), 0.0f);
  queue_ = std::make_unique<WorkQueue>(stage3_ ? "ZeRO-3 gathers and reduce-scatters" : "ZeRO-2 reduce-scatters");
  // What is not this task's goes back to the system.
  for (const Unit& unit : units_) {
    free_pages(grads_ + unit.begin, unit.length);
    if (stage3_) free_pages(values_ + unit.begin, unit.length);
  }
  install_hooks();
}

FullShard::~FullShard() { model_.set_hooks({}); }

void FullShard::install_hooks() {
  nn::LayerHooks hooks;
  if (stage3_) {
    // Gather before a layer runs, the neighbour it runs next too (prefetch);
    // free after (but keep the last layer's from its forward to its backward).
    const auto ready = [this](size_t layer, int step) {
      const int u = unit_of(layer);
      if (u < 0) return;
      gather(static_cast<size_t>(u));
      if (const int next = neighbour(static_cast<size_t>(u), step); prefetch_ && next >= 0)
        gather(static_cast<size_t>(next));
      wait_gathered(static_cast<size_t>(u));
    };
    hooks.before_forward = [ready](size_t layer) { ready(layer, +1); };
    // (a unit of several layers: gathered at its first layer's forward and its
    // last layer's backward, which is where its backward begins; `ready` is a
    // no-op for a unit that is whole)
    hooks.after_forward = [this](size_t layer) {
      const int u = unit_of(layer);
      if (u >= 0 && static_cast<size_t>(u) + 1 < units_.size() && units_[static_cast<size_t>(u)].last_layer == layer)
        free_values(static_cast<size_t>(u));
    };
    hooks.before_backward = [this, ready](size_t layer) {
      ready(layer, -1);
      if (const int u = unit_of(layer); u >= 0 && units_[static_cast<size_t>(u)].last_layer == layer)
        take_grad_buffer(static_cast<size_t>(u));
    };
  } else {
    hooks.before_backward = [this](size_t layer) {
      if (const int u = unit_of(layer); u >= 0 && units_[static_cast<size_t>(u)].last_layer == layer)
        take_grad_buffer(static_cast<size_t>(u));
    };
  }
  // (a unit's backward ends at its first layer's)
  hooks.after_backward = [this](size_t layer) {
    const int u = unit_of(layer);
    if (u < 0 || units_[static_cast<size_t>(u)].first_layer != layer) return;
    reduce_scatter(static_cast<size_t>(u));
    if (stage3_) free_values(static_cast<size_t>(u));
  };
  model_.set_hooks(std::move(hooks));
}

int FullShard::neighbour(size_t u, int step) const {
  const int64_t next = static_cast<int64_t>(u) + step;
  return next >= 0 && next < static_cast<int64_t>(units_.size()) ? static_cast<int>(next) : -1;
}

void FullShard::point_params(size_t u, const Tensor& base, bool grads) {
  const Unit& unit = units_[u];
  for (size_t k = unit.first_param; k < unit.end_param; ++k) {
    const Tensor& own = grads ? arena_grads_[k] : arena_values_[k];
    Tensor view = base.flat_slice(offsets_[k] - unit.begin, own.numel()).reshaped(own.shape());
    (grads ? params_[k]->grad : params_[k]->value) = std::move(view);
  }
}

void FullShard::gather(size_t u) {
  Unit& unit = units_[u];
  if (unit.gathered) return;  // whole already, or on its way
  if (free_value_buffers_.empty()) {
    free_value_buffers_.push_back(static_cast<int>(value_buffers_.size()));
    value_buffers_.emplace_back(Shape{buffer_floats()});
  }
  const int buffer = free_value_buffers_.back();
  float* whole = value_buffers_[static_cast<size_t>(buffer)].data();
  const int64_t length = unit.length, chunk = unit.chunk, shard_at = unit.shard_at;
  // (queued first: a queue ended by an error throws here, and the unit stays as it was)
  unit.gathered = queue_->submit([this, whole, length, chunk, shard_at] {
    const trace::Span span("all-gather", "comm");
    const float* mine = shard_values_.data() + shard_at;
    if (workers_.size() == 1) std::copy(mine, mine + length, whole);
    else workers_.all_gather(mine, static_cast<size_t>(chunk), whole);  // (N chunks fit any buffer)
  });
  free_value_buffers_.pop_back();
  unit.buffer = buffer;
  point_params(u, value_buffers_[static_cast<size_t>(buffer)], false);
}

void FullShard::wait_gathered(size_t u) {
  // (In a trace, the all-gather's time outside this span is what prefetch hid behind compute.)
  const trace::Span span("wait for all-gather", "comm");
  Stopwatch waited;
  queue_->wait(units_[u].gathered);
  waited_ += waited.seconds();
}

void FullShard::free_values(size_t u) {
  Unit& unit = units_[u];
  if (!unit.gathered) return;
  queue_->wait(unit.gathered);  // (never free while its gather writes)
  unit.gathered = 0;
  if (unit.buffer >= 0) {
    free_value_buffers_.push_back(unit.buffer);
    unit.buffer = -1;
    for (size_t k = unit.first_param; k < unit.end_param; ++k) params_[k]->value = arena_values_[k];
  } else {
    free_pages(values_ + unit.begin, unit.length);  // gathered into the arena (with_whole_model)
  }
}

uint64_t FullShard::gather_into_arena(size_t u) {
  const Unit& unit = units_[u];
  const int64_t begin = unit.begin, length = unit.length, chunk = unit.chunk, shard_at = unit.shard_at;
  if (chunk * workers_.size() != length && buffer_.empty()) buffer_.assign(static_cast<size_t>(buffer_floats()), 0.0f);
  return queue_->submit([this, begin, length, chunk, shard_at] {
    const trace::Span span("all-gather", "comm");
    const float* mine = shard_values_.data() + shard_at;
    float* whole = values_ + begin;
    populate_pages(whole, length);
    if (workers_.size() == 1) {
      std::copy(mine, mine + length, whole);
    } else if (chunk * workers_.size() == length) {  // (N divides it: straight into the arena)
      workers_.all_gather(mine, static_cast<size_t>(chunk), whole);
    } else {
      workers_.all_gather(mine, static_cast<size_t>(chunk), buffer_.data());
      std::copy(buffer_.data(), buffer_.data() + length, whole);
    }
  });
}

void FullShard::take_grad_buffer(size_t u) {
  const int b = next_grad_buffer_;
  next_grad_buffer_ = 1 - b;
  if (grad_tickets_[b]) {
    const trace::Span span("wait for reduce-scatter", "comm");
    Stopwatch waited;
    queue_->wait(grad_tickets_[b]);  // its last reduce-scatter has read it
    waited_ += waited.seconds();
  }
  units_[u].grad_buffer = b;
  point_params(u, grad_buffers_[b], true);
}

void FullShard::reduce_scatter(size_t u) {
  Unit& unit = units_[u];
  const int b = unit.grad_buffer;
  const int64_t length = unit.length, chunk = unit.chunk, shard_at = unit.shard_at;
  float* grads = grad_buffers_[b].data();
  grad_tickets_[b] = queue_->submit([this, grads, length, chunk, shard_at] {
    const trace::Span span("reduce-scatter", "comm");
    float* sum = shard_grads_.data() + shard_at;  // the micro-batches' sum of the job's mean
    if (workers_.size() == 1) {
      for (int64_t j = 0; j < length; ++j) sum[j] += grads[j];
      return;
    }
    std::fill(grads + length, grads + chunk * workers_.size(), 0.0f);  // the padding (another unit's leftovers)
    workers_.reduce_scatter(grads, static_cast<size_t>(chunk), mine_.data(), comm::ReduceOp::kMean);
    for (int64_t j = 0; j < chunk; ++j) sum[j] += mine_[static_cast<size_t>(j)];
  });
  for (size_t k = unit.first_param; k < unit.end_param; ++k) params_[k]->grad = arena_grads_[k];
}

double FullShard::finish_backward() {
  const trace::Span span("wait for reduce-scatter", "comm");
  Stopwatch waited;
  queue_->wait_all();
  const double seconds = waited_ + waited.seconds();
  waited_ = 0.0;
  return seconds;
}

void FullShard::clip_norms() {
  clip_pieces_by_norm(piece_pointers_, piece_of_, params_.size(), workers_, clipnorm_, global_clipnorm_);
}

double FullShard::after_update(bool /*applied*/) {  // (the same after a skipped step)
  shard_grads_.zero();
  Stopwatch waited;
  if (stage3_) {
    for (size_t u = 0; u < units_.size(); ++u) free_values(u);  // what is whole is of the values before
  } else {
    for (size_t u = 0; u < units_.size(); ++u) gather_into_arena(u);
    queue_->wait_all();
  }
  return waited.seconds();
}

std::vector<StatePiece> FullShard::state_pieces(optim::Optimizer& optimizer) const {
  std::vector<StatePiece> out = pieces_of(piece_pointers_, piece_of_, params_, false);
  for (StatePiece& piece : pieces_of(optimizer.state(), piece_of_, params_, true)) out.push_back(std::move(piece));
  return out;
}

void FullShard::load(const Strategy::TensorLookup& model, const Strategy::TensorLookup& optimizer,
                     optim::Optimizer& optimizer_of_pieces) {
  queue_->wait_all();
  load_pieces(piece_pointers_, piece_of_, params_, model, "model");
  load_pieces(optimizer_of_pieces.state(), piece_of_, params_, optimizer, "optimizer state");
  after_update(true);  // the arena's whole values are of the state before
}

void FullShard::with_whole_model(const std::function<void()>& use) {
  queue_->wait_all();
  if (stage3_)
    for (size_t u = 0; u < units_.size(); ++u) {
      free_values(u);  // (out of its buffer: the arena is the whole model's place)
      units_[u].gathered = gather_into_arena(u);
    }
  queue_->wait_all();
  use();
  if (stage3_)
    for (size_t u = 0; u < units_.size(); ++u) free_values(u);
}

}  // namespace dtrain::strategy
