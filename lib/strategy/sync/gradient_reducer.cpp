// Implementation of gradient_reducer.h.
#include "strategy/sync/gradient_reducer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "kernels/device.h"
#include "kernels/ops.h"
#include "tensor/arena.h"

namespace dtrain::strategy {

size_t count_non_finite(const float* data, size_t n) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(data[i])) ++count;
  return count;
}

std::vector<std::vector<size_t>> trainable_indices_by_layer(const nn::Sequential& model,
                                                            const std::vector<nn::Param*>& trainable) {
  std::vector<std::vector<size_t>> out;
  for (const auto& layer : model.layers()) {
    out.emplace_back();
    for (nn::Param* p : layer->params())
      if (p->trainable()) {
        const auto found = std::find(trainable.begin(), trainable.end(), p);
        DT_CHECK(found != trainable.end(), "a trainable param of layer ", layer->name(), " is not among the model's");
        out.back().push_back(static_cast<size_t>(found - trainable.begin()));
      }
  }
  return out;
}

size_t count_non_finite_gradients(const std::vector<nn::Param*>& params) {
  if (!params.empty() && !params[0]->grad.device().is_cpu()) {
    Tensor flag({1}, params[0]->grad.device());  // zero-filled
    for (const nn::Param* p : params) kernels::flag_non_finite(p->grad, flag);
    float set = 0.0f;
    flag.copy_to_host(&set);
    return set > 0.0f ? 1 : 0;
  }
  size_t count = 0;
  std::vector<float> host;
  for (const nn::Param* p : params) {
    host.resize(static_cast<size_t>(p->grad.numel()));
    p->grad.copy_to_host(host.data());
    count += count_non_finite(host.data(), host.size());
  }
  return count;
}

namespace {

// A bfloat16 tensor of x's shape on x's device: a bucket's buffer on the wire.
Tensor bfloat16_like(const Tensor& x) { return Tensor(x.shape(), x.device(), DType::kBF16); }

}  // namespace

GradientReducer::GradientReducer(const std::vector<nn::Param*>& params, comm::Communicator& comm,
                                 int64_t bytes_per_pack, AllreduceDType dtype)
    : comm_(comm), dtype_(dtype) {
  int64_t total = 0;
  for (const nn::Param* p : params) total += static_cast<int64_t>(p->grad.bytes());
  if (bytes_per_pack <= 0) bytes_per_pack = std::clamp<int64_t>(total / 4, 64 << 10, 25 << 20);
  // Reverse model order: the last layer's gradients are ready first.
  Bucket current;
  int64_t current_bytes = 0;
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    current.params.push_back(*it);
    current_bytes += static_cast<int64_t>((*it)->grad.bytes());
    if (current_bytes >= bytes_per_pack) {
      buckets_.push_back(std::move(current));
      current = {};
      current_bytes = 0;
    }
  }
  if (!current.params.empty()) buckets_.push_back(std::move(current));
  device_ = comm.device_buffers();
  in_place_ = !device_ && dtype == AllreduceDType::kFloat32 && comm.reduces_pieces_in_place() &&
              std::all_of(params.begin(), params.end(), [](const nn::Param* p) {
                return p->grad.device().is_cpu() && p->grad.dtype() == DType::kF32;
              });
  const bool host_float32 = !device_ && !in_place_ && dtype == AllreduceDType::kFloat32;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    for (const nn::Param* p : bucket.params) bucket_of_[p] = b;
    lay_out(bucket, /*arena=*/dtype == AllreduceDType::kFloat32);
    if (host_float32) set_view(bucket);
    if (!device_ && !in_place_ && !bucket.view) bucket.buffer.resize(bucket.floats);  // (zeros: the padding)
  }
  if (!device_) {
    thread_ = std::thread([this] { comm_loop(); });
    return;
  }
  for (Bucket& bucket : buckets_) {
    size_t floats = 0;
    for (const nn::Param* p : bucket.params) floats += static_cast<size_t>(p->grad.numel());
    bucket.device_buffer = Tensor({static_cast<int64_t>(floats)}, bucket.params.front()->grad.device());
    if (dtype_ == AllreduceDType::kBfloat16) bucket.wire = bfloat16_like(bucket.device_buffer);
  }
  non_finite_flag_ = Tensor({1}, buckets_.front().device_buffer.device());
}

size_t GradientReducer::view_buckets() const {
  return static_cast<size_t>(std::count_if(buckets_.begin(), buckets_.end(), [](const Bucket& b) { return b.view; }));
}

void GradientReducer::lay_out(Bucket& bucket, bool arena) {
  // Model order is the reverse of the bucket's: its last param comes first.
  // (bfloat16 buckets are never views: their layout is dense.)
  size_t offset = 0;
  bucket.at.assign(bucket.params.size(), 0);
  for (size_t i = bucket.params.size(); i-- > 0;) {
    const int64_t n = bucket.params[i]->grad.numel();
    bucket.at[i] = offset;
    bucket.floats = offset + static_cast<size_t>(n);
    offset += static_cast<size_t>(arena ? TensorArena::padded(n) : n);
  }
}

void GradientReducer::set_view(Bucket& bucket) {
  // The bucket's params are in reverse model order: the range starts at the last
  // one's gradient and each next one's follows the one before (its padding apart).
  const std::vector<nn::Param*>& params = bucket.params;
  for (const nn::Param* p : params)
    if (!p->grad.device().is_cpu() || p->grad.dtype() != DType::kF32) return;
  for (size_t i = params.size() - 1; i > 0; --i) {
    const Tensor& before = params[i]->grad;
    if (params[i - 1]->grad.data() != before.data() + TensorArena::padded(before.numel())) return;
  }
  bucket.view = params.back()->grad.data();
  DT_CHECK_EQ(static_cast<size_t>(params.front()->grad.data() + params.front()->grad.numel() - bucket.view),
              bucket.floats);
}

GradientReducer::~GradientReducer() {
  if (!thread_.joinable()) return;  // the device path has no thread
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void GradientReducer::ride_along(size_t count, std::function<void(float* values)> fill) {
  DT_CHECK(extras_.empty() && count > 0, "ride_along is set once");
  extras_.assign(count, 0.0f);
  fill_extras_ = std::move(fill);
  Bucket& last = buckets_.back();
  if (in_place_) {
    riding_.assign(count, 0.0f);
    return;
  }
  if (!device_) {
    last.view = nullptr;  // the values need a buffer to travel with: the last bucket is packed
    last.buffer.resize(last.floats + count);
    return;
  }
  const int64_t floats = last.device_buffer.numel();
  last.device_buffer = Tensor({floats + static_cast<int64_t>(count)}, last.device_buffer.device());
  if (dtype_ == AllreduceDType::kBfloat16) last.wire = bfloat16_like(last.device_buffer);
}

void GradientReducer::begin_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  DT_CHECK(pending_ == 0 && queue_.empty(), "a step began while buckets were in flight");
  for (auto& b : buckets_) b.ready = 0;
  non_finite_ = 0;
}

void GradientReducer::param_ready(const nn::Param* p) {
  auto it = bucket_of_.find(p);
  DT_CHECK(it != bucket_of_.end(), "gradient of an unknown param ", p->name);
  Bucket& bucket = buckets_[it->second];
  if (++bucket.ready < bucket.params.size()) return;
  if (device_) return launch_on_device(it->second);
  const bool last = it->second + 1 == buckets_.size();
  if (in_place_) {
    // Nothing to pack: the communicator reads the gradients where they lie.
    bucket.pieces.clear();
    for (nn::Param* q : bucket.params) {
      bucket.pieces.push_back({q->grad.data(), static_cast<size_t>(q->grad.numel())});
      if (track_non_finite_) non_finite_ += count_non_finite(q->grad.data(), bucket.pieces.back().count);
    }
    if (fill_extras_ && last) {
      fill_extras_(riding_.data());
      bucket.pieces.push_back({riding_.data(), riding_.size()});
    }
  } else if (bucket.view) {
    // Nothing to pack: the bucket's range of the arena is reduced where it lies.
    if (track_non_finite_)
      for (const nn::Param* q : bucket.params)
        non_finite_ += count_non_finite(q->grad.data(), static_cast<size_t>(q->grad.numel()));
  } else {
    pack(bucket, last);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(it->second);
    ++pending_;
  }
  // The last bucket is left to finish_step(), which this thread calls next: no
  // hand-off to another thread (and core) when there is nothing to overlap with.
  // The communication thread takes it if it is still busy with earlier ones.
  if (!last) work_cv_.notify_one();
}

void GradientReducer::pack(Bucket& bucket, bool last) {
  // Pack on this thread (a memcpy, or a copy from the GPU that waits for the
  // backward ops issued so far), reduce on the communication thread.
  // At the wire layout's places: the padding between them stays zero.
  float* base = bucket.buffer.data();
  for (size_t k = 0; k < bucket.params.size(); ++k) bucket.params[k]->grad.copy_to_host(base + bucket.at[k]);
  if (track_non_finite_) non_finite_ += count_non_finite(base, bucket.floats);
  if (fill_extras_ && last) fill_extras_(base + bucket.floats);
}

double GradientReducer::finish_step() {
  const trace::Span span("gradient wait", "comm");
  Stopwatch waited;
  if (device_) {
    finish_on_device();
    return waited.seconds();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  while (pending_ > 0 && !error_) {
    if (!busy_ && !queue_.empty()) {
      reduce_next(lock);  // the communication thread is idle: reduce here
      continue;
    }
    done_cv_.wait(lock, [this] { return pending_ == 0 || error_ || (!busy_ && !queue_.empty()); });
  }
  if (error_) std::rethrow_exception(error_);
  return waited.seconds();
}

void GradientReducer::launch_on_device(size_t b) {
  Bucket& bucket = buckets_[b];
  // Device-to-device copies on the compute stream, after the backward ops that
  // produced the gradients.
  int64_t offset = 0;
  for (const nn::Param* q : bucket.params) {
    bucket.device_buffer.flat_slice(offset, q->grad.numel()).copy_from(q->grad);
    offset += q->grad.numel();
  }
  const bool last = b + 1 == buckets_.size();
  if (fill_extras_ && last) {
    std::vector<float> extras(extras_.size());
    fill_extras_(extras.data());
    bucket.device_buffer.flat_slice(offset, static_cast<int64_t>(extras.size())).copy_from_host(extras.data());
  }
  const trace::Span span("all-reduce launch", "comm",
                         trace::enabled() ? str("bucket ", b, ", ", bucket.device_buffer.bytes(), " bytes")
                                          : std::string());
  void* stream = kernels::compute_stream(bucket.device_buffer.device());
  if (bucket.wire.defined()) {
    // bfloat16 on the wire: rounded on the compute stream, summed by NCCL in bfloat16.
    kernels::cast(bucket.device_buffer, bucket.wire);
    bucket.work = comm_.all_reduce_device(bucket.wire.raw(), static_cast<size_t>(bucket.wire.numel()),
                                          comm::ElementType::kBfloat16, comm::ReduceOp::kMean, stream);
    return;
  }
  bucket.work = comm_.all_reduce_device(bucket.device_buffer.raw(), static_cast<size_t>(bucket.device_buffer.numel()),
                                        comm::ElementType::kFloat32, comm::ReduceOp::kMean, stream);
}

void GradientReducer::finish_on_device() {
  for (const Bucket& bucket : buckets_)
    DT_CHECK(bucket.ready == bucket.params.size(), "finish_step before every gradient was ready");
  // The all-reduces run in launch order on NCCL's stream: once the last is done,
  // all are. Waiting for it on the host polls the deadline and the lost peers.
  buckets_.back().work->wait();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    Bucket& bucket = buckets_[b];
    void* stream = kernels::compute_stream(bucket.device_buffer.device());
    bucket.work->block_stream(stream);
    if (bucket.wire.defined()) kernels::cast(bucket.wire, bucket.device_buffer);  // back to float32
    int64_t offset = 0;
    for (nn::Param* q : bucket.params) {
      // On the compute stream, before the optimizer's update (issued after finish_step()).
      q->grad.copy_from(bucket.device_buffer.flat_slice(offset, q->grad.numel()));
      offset += q->grad.numel();
    }
    if (track_non_finite_) {
      // Loss scaling: the reduced gradients, identical on every replica, hold an
      // inf or NaN when any replica's did (or the bfloat16 wire overflowed).
      if (b == 0) non_finite_flag_.zero();
      for (const nn::Param* q : bucket.params) kernels::flag_non_finite(q->grad, non_finite_flag_);
    }
    if (fill_extras_ && b + 1 == buckets_.size()) {  // a few floats to the host; the mean back to the sum
      bucket.device_buffer.flat_slice(offset, static_cast<int64_t>(extras_.size())).copy_to_host(extras_.data());
      for (float& v : extras_) v *= static_cast<float>(comm_.size());
    }
    bucket.work.reset();
  }
  if (track_non_finite_) {
    float flag = 0.0f;
    non_finite_flag_.copy_to_host(&flag);
    non_finite_ = flag > 0.0f ? 1 : 0;
  }
}

void GradientReducer::comm_loop() {
  trace::set_thread_name("gradient all-reduce");
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [this] { return stop_ || error_ || (!busy_ && !queue_.empty()); });
    if (stop_ || error_) return;  // the communicator is unusable after an error
    reduce_next(lock);
  }
}

void GradientReducer::reduce_next(std::unique_lock<std::mutex>& lock) {
  // One bucket at a time, in queue order, whichever thread runs it: every task
  // issues the collectives in the same order.
  const size_t b = queue_.front();
  queue_.pop_front();
  busy_ = true;
  lock.unlock();
  std::exception_ptr error;
  try {
    reduce_bucket(b);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  busy_ = false;
  if (error) error_ = error;
  else --pending_;
  done_cv_.notify_all();
  // The communication thread only when there is more for it (or it must end): a
  // step's last bucket, reduced by finish_step(), wakes nobody.
  if (error || !queue_.empty()) work_cv_.notify_all();
}

namespace {
std::atomic<bool> skip_next_allreduce{false};
}  // namespace

void inject_skip_next_allreduce() { skip_next_allreduce.store(true); }

void GradientReducer::reduce_bucket(size_t b) {
  Bucket& bucket = buckets_[b];
  if (skip_next_allreduce.exchange(false)) return;  // injected: see inject_skip_next_allreduce()
  if (in_place_) {
    size_t floats = 0;
    for (const comm::Piece& p : bucket.pieces) floats += p.count;
    const trace::Span span("all-reduce", "comm",
                           trace::enabled() ? str("bucket ", b, ", ", floats * sizeof(float), " bytes") : std::string());
    comm_.all_reduce_pieces(bucket.pieces, comm::ReduceOp::kMean);
    if (fill_extras_ && b + 1 == buckets_.size())  // the mean back to the sum
      for (size_t i = 0; i < extras_.size(); ++i) extras_[i] = riding_[i] * static_cast<float>(comm_.size());
    return;
  }
  if (bucket.view) {
    const trace::Span span("all-reduce", "comm",
                           trace::enabled() ? str("bucket ", b, ", ", bucket.floats * 4, " bytes, in place")
                                            : std::string());
    comm_.all_reduce(bucket.view, bucket.floats, comm::ReduceOp::kMean);
    return;
  }
  const bool bfloat16 = dtype_ == AllreduceDType::kBfloat16;
  const size_t bytes = bucket.buffer.size() * (bfloat16 ? 2 : sizeof(float));
  const trace::Span span("all-reduce", "comm", trace::enabled() ? str("bucket ", b, ", ", bytes, " bytes") : std::string());
  if (bfloat16) comm_.all_reduce_bfloat16(bucket.buffer.data(), bucket.buffer.size(), comm::ReduceOp::kMean);
  else comm_.all_reduce(bucket.buffer.data(), bucket.buffer.size(), comm::ReduceOp::kMean);
  const float* base = bucket.buffer.data();
  // On a GPU the copies are issued on the compute stream, before the
  // optimizer's update, which is issued after finish_step().
  for (size_t k = 0; k < bucket.params.size(); ++k) bucket.params[k]->grad.copy_from_host(base + bucket.at[k]);
  if (fill_extras_ && b + 1 == buckets_.size())  // the mean back to the sum
    for (size_t i = 0; i < extras_.size(); ++i) extras_[i] = base[bucket.floats + i] * static_cast<float>(comm_.size());
}

}  // namespace dtrain::strategy
