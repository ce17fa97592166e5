// GradientReducer: averages gradients across a group of replicas in buckets, each
// bucket's all-reduce starting as soon as backward has produced all of its
// gradients, on a communication thread, while backward goes on (PyTorch DDP's
// scheme; bucket size is strategy.bytes_per_pack). The last bucket, which has
// nothing left to overlap with, is reduced by the thread waiting in
// finish_step() unless the communication thread is still busy.
//
// Buckets are filled in reverse model order, the order backward produces
// gradients. On the host a bucket travels in one layout on every task: its
// gradients in model order at the offsets an arena gives them (each padded to
// TensorArena::kAlignFloats, the padding zero). Where a bucket's float32 host
// gradients lie back to back in the model's gradient arena
// (nn::Sequential::place) the bucket is a view of that range, all-reduced (mean)
// where it lies: no copies (PyTorch DDP's gradient_as_bucket_view). Otherwise
// (GPU gradients through host copies, bfloat16 on the wire, scattered tensors;
// the last bucket when values ride along with it) the gradients are copied into
// a buffer of that layout, all-reduced and copied back: a task that views and
// one that packs send the same floats (bfloat16 buckets, never views, are dense); or, on a communicator that reduces pieces in place
// (shared memory: Communicator::reduces_pieces_in_place) with float32 gradients
// in host memory, handed to it as they lie (all_reduce_pieces): it copies them
// straight into its segment and the mean straight back, two copies fewer.
// finish_step() waits for the last bucket and returns how long the caller had to
// wait: the share of step time spent waiting on communication.
//
// A few small values per step (the loss sums and the stop flag, the count of
// non-finite gradient values under loss scaling) can ride along in the last
// bucket's all-reduce instead of costing a collective of their own (ride_along).
//
// With strategy.allreduce_dtype bfloat16 the buckets travel as bfloat16
// (Communicator::all_reduce_bfloat16): half the bytes, each gradient rounded to
// 8 significant bits. Values riding along travel in the bucket's type, so they
// are rounded too: only flags and small counts (sums of integers up to 256 stay
// exact) should ride along then.
//
// On a communicator of device buffers (NCCL, device_buffers() true) nothing goes
// through the host: each bucket has one device buffer, packed with device-to-
// device copies on the compute stream, and its all-reduce (mean, float32) is
// launched at once, asynchronously, ordered after the packing on the GPU; no
// communication thread. finish_step() waits on the host for the last bucket's
// all-reduce (NCCL's polled wait: deadline, lost peers), makes the compute stream
// wait for every bucket and issues the copies back. Only the ride-along values
// cross to the host. With allreduce_dtype bfloat16 each bucket is rounded into a
// bfloat16 device buffer that NCCL reduces (its sums are in bfloat16: NCCL has no
// float32 accumulation for it) and widened back. With track_non_finite a flag on
// the GPU collects inf/NaN over the *reduced* gradients (identical on every
// replica, so all decide alike without a ride-along; TF checks the same way),
// read on the host at the end of finish_step(): there non_finite() is the
// job-wide answer, 1 or 0, rather than this replica's count (on_device()).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "comm/communicator.h"
#include "nn/layer.h"
#include "nn/sequential.h"
#include "strategy/strategy_spec.h"

namespace dtrain::strategy {

// How many of data[0..n) are inf or NaN.
size_t count_non_finite(const float* data, size_t n);
// How many values of the params' gradients are inf or NaN: counted on the host
// for host gradients; for GPU gradients 0 or 1, from one flag set on the GPU
// (kernels::flag_non_finite) and read back as one float, not every gradient.
size_t count_non_finite_gradients(const std::vector<nn::Param*>& params);

// For each layer of `model`, the places in `trainable` (its trainable params, in
// model order) of the layer's trainable params: how a backward hook reaches a
// layer's gradients and their accumulation buffers without searching.
std::vector<std::vector<size_t>> trainable_indices_by_layer(const nn::Sequential& model,
                                                            const std::vector<nn::Param*>& trainable);

class GradientReducer {
 public:
  // params: the trainable params in model order. bytes_per_pack 0 = auto (a
  // quarter of all gradients, between 64 KiB and 25 MiB).
  GradientReducer(const std::vector<nn::Param*>& params, comm::Communicator& comm, int64_t bytes_per_pack,
                  AllreduceDType dtype = AllreduceDType::kFloat32);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  size_t bucket_count() const { return buckets_.size(); }
  // Buckets reduced where their gradients lie in the arena (views), for tests.
  size_t view_buckets() const;

  // `count` floats travel with the last bucket (the one backward finishes last):
  // `fill` writes them when that bucket is packed, on the thread running
  // backward; after finish_step(), extras() holds their sums over the group.
  void ride_along(size_t count, std::function<void(float* values)> fill);
  const std::vector<float>& extras() const { return extras_; }

  // From now on, count the inf and NaN values of this replica's gradients as
  // they are packed (before the all-reduce): non_finite() is the step's count so
  // far, complete when the last bucket's ride-along values are filled.
  void track_non_finite() { track_non_finite_ = true; }
  size_t non_finite() const { return non_finite_; }
  // The device path (NCCL): non_finite() is the job-wide answer after finish_step().
  bool on_device() const { return device_; }

  void begin_step();
  // p's gradient is final for this step (called from the thread running backward).
  void param_ready(const nn::Param* p);
  // Waits until every bucket is reduced and copied back; rethrows a communication
  // error (PeerLost, TimeoutError). Returns the seconds spent waiting.
  double finish_step();

 private:
  struct Bucket {
    std::vector<nn::Param*> params;
    // The host path's wire layout, the same on every task whatever its device:
    // the gradients in model order, each at a TensorArena::padded offset (the
    // layout of an arena, so a view and a packed buffer agree), then the extras.
    std::vector<size_t> at;     // each param's offset (the order of `params`)
    size_t floats = 0;          // the gradients' span, without the extras
    std::vector<float> buffer;  // the host path's packed copy (not when reducing in place or a view)
    float* view = nullptr;      // the host path's arena range of the gradients, reduced there (or nullptr)
    std::vector<comm::Piece> pieces;  // in place: the gradients, then the ride-along values
    size_t ready = 0;
    Tensor device_buffer;       // the device path's: the gradients, then the extras
    Tensor wire;                // the device path's bfloat16 copy of it (allreduce_dtype bfloat16)
    std::unique_ptr<comm::DeviceWork> work;  // the device path's all-reduce in flight
  };
  // The bucket's wire layout (at, floats): an arena's (float32) or dense (bfloat16).
  static void lay_out(Bucket& bucket, bool arena);
  // Makes `bucket` a view of the arena where its gradients lie back to back.
  static void set_view(Bucket& bucket);
  void comm_loop();
  // Takes the next queued bucket (lock held on entry and exit, released while
  // reducing) and reduces it on the calling thread; an error ends the reducer.
  void reduce_next(std::unique_lock<std::mutex>& lock);
  void reduce_bucket(size_t b);
  // The host path with buffers: the bucket's gradients (and, in the last one,
  // the ride-along values) into its buffer, on the thread running backward.
  void pack(Bucket& bucket, bool last);
  // The device path (device_ is true): pack, launch, and the end of a step.
  void launch_on_device(size_t b);
  void finish_on_device();

  comm::Communicator& comm_;
  bool device_ = false;  // the gradients stay on the GPU (NCCL)
  bool in_place_ = false;  // the host path without buffers: comm_ reduces the gradients where they lie
  AllreduceDType dtype_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const nn::Param*, size_t> bucket_of_;

  std::thread thread_;
  std::mutex mutex_;
  // Two conditions, so that a step's end wakes no thread that has nothing to do:
  // the communication thread waits on work_cv_ for a bucket (or the end),
  // finish_step() on done_cv_ for a bucket reduced (or one it may reduce itself).
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::deque<size_t> queue_;  // buckets ready to reduce
  size_t pending_ = 0;        // buckets launched and not yet reduced
  bool busy_ = false;         // a thread is reducing a bucket
  bool stop_ = false;
  std::exception_ptr error_;
  std::function<void(float*)> fill_extras_;
  std::vector<float> extras_;  // summed over the group after finish_step()
  std::vector<float> riding_;  // in place: this step's ride-along values, then their mean
  bool track_non_finite_ = false;
  size_t non_finite_ = 0;  // this step's, on the thread running backward
  Tensor non_finite_flag_;  // the device path's: 1 when a gradient held inf or NaN (one float)
};

// Fault injection (DTRAIN_INJECT skip_allreduce@step=N, for hang reports'
// tests and demos): this process's next bucket all-reduce is skipped, as a bug
// that leaves one out would; the others wait in it.
void inject_skip_next_allreduce();

}  // namespace dtrain::strategy
