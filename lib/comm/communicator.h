// Communicator: the backend-neutral collective interface of dtrain.
//
// One Communicator is one member (rank) of a group of size() ranks. Every call is
// collective: all ranks of the group make the same calls in the same order with
// the same counts. Implementations: Gloo over TCP for host buffers
// (gloo_communicator.h), shared memory for replicas on threads of one process
// (local_communicator.h), and NCCL for device (GPU) buffers (nccl_communicator.h,
// CUDA builds; device_buffers() is true). Every call has a deadline: a lost peer surfaces as
// dtrain::PeerLost, a deadline that passed as dtrain::TimeoutError, a call the
// backend refuses (the ranks disagree on sizes) as dtrain::CommError. After such
// an error the communicator is unusable; every later call throws again.
// No backend header appears here.
#pragma once

#include <cstddef>
#include <memory>

#include "tensor/tensor.h"

namespace dtrain::comm {

enum class ReduceOp { kSum, kMean };

const char* reduce_op_name(ReduceOp op);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data[0..count) becomes the element-wise reduction over all ranks (in place).
  virtual void all_reduce(float* data, size_t count, ReduceOp op) = 0;
  // all_reduce with the values travelling as bfloat16 (strategy.allreduce_dtype):
  // each rank's float32 values are rounded to bfloat16 (nearest, ties to even),
  // summed, and the sum rounded to bfloat16 again; kMean then divides in float32.
  // Each addition is done in float32. This default sends float32 (no bytes saved,
  // one rounding of the whole sum): for communicators with no bfloat16 path of
  // their own (the in-process groups, shared memory). Gloo overrides it and sends
  // half the bytes; there the partial sums travel between ranks as bfloat16, so
  // they are rounded after every addition (a sum of N ranks: N - 1 roundings).
  virtual void all_reduce_bfloat16(float* data, size_t count, ReduceOp op);
  // data[0..count) on every rank becomes root's data[0..count).
  virtual void broadcast(float* data, size_t count, int root) = 0;
  // out[r*count .. (r+1)*count) = rank r's in[0..count); out holds size()*count.
  virtual void all_gather(const float* in, size_t count, float* out) = 0;
  // in holds size()*count_per_rank; out[0..count_per_rank) = the reduction over all
  // ranks of in[rank()*count_per_rank .. (rank()+1)*count_per_rank).
  virtual void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) = 0;
  // Returns once every rank has entered the barrier.
  virtual void barrier() = 0;
  // Whether the pointers above are device (GPU) memory (NCCL) rather than host memory.
  virtual bool device_buffers() const { return false; }

  // Tensor conveniences calling the above: a tensor where the engine cannot read
  // it (a GPU tensor and a host engine) goes through a host copy.
  void all_reduce(Tensor& t, ReduceOp op);
  void broadcast(Tensor& t, int root);
};

// data[0..count) rounded to bfloat16 values (nearest, ties to even), kept as float32.
void round_to_bfloat16(float* data, size_t count);

// A Communicator that forwards every call to `other`, which it does not own
// (`other` must outlive it): to hand a group someone else owns to code that
// takes ownership of its communicators.
std::unique_ptr<Communicator> borrow(Communicator& other);

}  // namespace dtrain::comm
