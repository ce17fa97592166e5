// Communicator: the backend-neutral collective interface of dtrain.
//
// One Communicator is one member (rank) of a group of size() ranks. Every call but
// send/recv is collective: all ranks of the group make the same calls in the
// same order with the same counts. Implementations: Gloo over TCP for host buffers
// (gloo_communicator.h), shared memory for replicas on threads of one process
// (local_communicator.h), and NCCL for device (GPU) buffers (nccl_communicator.h,
// CUDA builds; device_buffers() is true). Every call has a deadline: a lost peer surfaces as
// dtrain::PeerLost, a deadline that passed as dtrain::TimeoutError, a call the
// backend refuses (the ranks disagree on sizes) as dtrain::CommError. After such
// an error the communicator is unusable; every later call throws again.
// Besides the collectives: point-to-point messages between two ranks (send/recv,
// matched by tag; pipeline parallelism) and split(), which makes sub-groups.
// No backend header appears here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "tensor/tensor.h"

namespace dtrain::comm {

// Asks the heartbeats whether a peer of the job was lost: the message naming it
// (the task, its address, its last step), or nullopt while all are alive. The
// waits of communicators that cannot see a lost peer themselves (NCCL's, shared
// memory's) poll it.
using PeerLostCheck = std::function<std::optional<std::string>()>;

enum class ReduceOp { kSum, kMean };

// count floats at data: one piece of the buffer all_reduce_pieces reduces.
struct Piece {
  float* data = nullptr;
  size_t count = 0;
};

const char* reduce_op_name(ReduceOp op);

// The element type of a device buffer in a collective (the device-buffer path).
enum class ElementType { kFloat32, kBfloat16 };
const char* element_type_name(ElementType type);  // "float", "bfloat16" (nccl-tests' names)
size_t element_size(ElementType type);

// One device-buffer collective in flight (Communicator::all_reduce_device).
class DeviceWork {
 public:
  virtual ~DeviceWork() = default;
  // Waits on the host until the collective finished on the device (with the
  // communicator's deadline and lost-peer check).
  virtual void wait() = 0;
  // Makes `stream` (a cudaStream_t) wait on the device for the collective; the
  // host does not wait. Use it before reading the result or freeing the buffers there.
  virtual void block_stream(void* stream) = 0;
  // True once it finished; throws as wait() does when it failed.
  virtual bool done() = 0;
};

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
  // all_reduce of the pieces' values one after another, as one buffer, in place:
  // the same values as packing them into one buffer, all_reduce of it and
  // unpacking it, which is what this default does. A communicator that reads and
  // writes the pieces where they lie (shared memory: straight between them and
  // its segment) overrides it and says so with reduces_pieces_in_place(); a
  // caller then needs no buffer of its own and saves two copies of the values
  // (the gradient reducer, on the host).
  virtual void all_reduce_pieces(std::span<const Piece> pieces, ReduceOp op);
  virtual bool reduces_pieces_in_place() const { return false; }
  // Memory of this member that the other members reach too (shared memory), for
  // `floats` values, or nullptr where the communicator has none (the default).
  // Pieces that lie in it are all-reduced by all_reduce_pieces where they are:
  // each member sums its share of the elements over every member's area and
  // writes the result into all of them, with no copy in or out (PyTorch DDP's
  // gradient_as_bucket_view, the other way round: the gradients live in the
  // communicator's memory). Collective: every member asks, for the same size
  // (asked again for that size, it is the same area, zero-filled again; for
  // another, none). The memory stays valid while the returned pointer (or a
  // copy) lives.
  virtual std::shared_ptr<float> shared_area(size_t floats) { return nullptr; }
  // data[0..count) on every rank becomes root's data[0..count).
  virtual void broadcast(float* data, size_t count, int root) = 0;
  // out[r*count .. (r+1)*count) = rank r's in[0..count); out holds size()*count.
  virtual void all_gather(const float* in, size_t count, float* out) = 0;
  // in holds size()*count_per_rank; out[0..count_per_rank) = the reduction over all
  // ranks of in[rank()*count_per_rank .. (rank()+1)*count_per_rank).
  // all_gather and reduce_scatter split a buffer into size() equal parts: a caller
  // whose buffer length does not divide by size() (ZeRO's flat parameters) pads it
  // to padded_count(length, size()) elements (zeros) and passes padded/size().
  virtual void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) = 0;
  // Returns once every rank has entered the barrier.
  virtual void barrier() = 0;
  // Whether the pointers above are device (GPU) memory (NCCL) rather than host memory.
  virtual bool device_buffers() const { return false; }
  // The device-buffer path (communicators whose device_buffers() is true): an
  // all-reduce of `count` elements of `type` at device address `data`, in place,
  // launched after the work issued on `stream` (a cudaStream_t) without waiting
  // for it; kMean divides by size(). The returned work says when it is done. The
  // default (host-buffer communicators) is an InternalError: callers ask
  // device_buffers() first.
  virtual std::unique_ptr<DeviceWork> all_reduce_device(void* data, size_t count, ElementType type, ReduceOp op,
                                                        void* stream);
  // Point-to-point on device buffers, likewise launched (a pipeline's NCCL pairs):
  // data[0..count) to rank `peer` / from it, matched in issue order.
  virtual std::unique_ptr<DeviceWork> send_device(const void* data, size_t count, ElementType type, int peer,
                                                  void* stream);
  virtual std::unique_ptr<DeviceWork> recv_device(void* data, size_t count, ElementType type, int peer,
                                                  void* stream);

  // Point-to-point, for pipeline stages; not collective: only the two ranks take
  // part. send() gives rank `peer` the message data[0..count) under `tag`;
  // recv() fills data[0..count) with the message rank `peer` sent this rank under
  // `tag`. Messages of a pair are matched by tag, not by order: a recv for tag T
  // takes the send with tag T from that peer, whatever order the sends and recvs
  // were posted in (a pipeline tags them by step, micro-batch and direction, e.g.
  // step * 1024 + micro_batch * 2 + direction); sends with the same tag are
  // received in the order they were sent. Tags go up to kMaxTag.
  // send() is eager: it copies the message and returns without waiting for the
  // peer's recv, so two ranks may both send before they receive. A message the
  // peer does not take within the deadline may fail the sender's communicator
  // (Gloo: its next call throws TimeoutError); a message sent before the sender's
  // communicator is destroyed can still be received (Gloo's destructor waits, at
  // most the deadline, until its messages were taken).
  // recv() blocks: TimeoutError when nothing came within the deadline, PeerLost
  // when the peer is gone, CommError when the counts of the two sides differ;
  // each message names the peer rank and the tag. send() and recv() may be called
  // from other threads while this communicator's other calls run (a pipeline's
  // sender thread); the other calls come from one thread. Sending to oneself, a peer
  // outside 0..size()-1 or a tag above kMaxTag is a CommError. The default
  // implementation: CommError (no point-to-point on this communicator). NCCL
  // matches by order and its sends wait for the receiver (nccl_communicator.h).
  static constexpr uint64_t kMaxTag = (uint64_t{1} << 62) - 1;
  virtual void send(const float* data, size_t count, int peer, uint64_t tag);
  virtual void recv(float* data, size_t count, int peer, uint64_t tag);

  // Sub-groups (c10d new_group, ncclCommSplit, MPI_Comm_split). Collective: every
  // rank calls it. Ranks passing the same color >= 0 form a new communicator whose
  // ranks are ordered by (key, rank in this one); a negative color joins no group
  // and gets nullptr. The new communicator has this one's deadline and is
  // independent of it (either may be destroyed first). The default
  // implementation: CommError (this communicator cannot be split).
  virtual std::unique_ptr<Communicator> split(int color, int key);

  // Tensor conveniences calling the above: a tensor where the engine cannot read
  // it (a GPU tensor and a host engine) goes through a host copy.
  void all_reduce(Tensor& t, ReduceOp op);
  void broadcast(Tensor& t, int root);

 protected:
  // For send/recv implementations: CommError (`what` on `who`) unless `peer` is
  // another rank of this group and tag <= kMaxTag.
  void check_point_to_point(const char* what, int peer, uint64_t tag, const std::string& who) const;
};

// The smallest multiple of size that is >= count: the length to which a buffer of
// `count` values is padded before all_gather / reduce_scatter over `size` ranks.
size_t padded_count(size_t count, int size);

// data[0..count) rounded to bfloat16 values (nearest, ties to even), kept as float32.
void round_to_bfloat16(float* data, size_t count);

// A Communicator that forwards every call to `other`, which it does not own
// (`other` must outlive it): to hand a group someone else owns to code that
// takes ownership of its communicators.
std::unique_ptr<Communicator> borrow(Communicator& other);

}  // namespace dtrain::comm
