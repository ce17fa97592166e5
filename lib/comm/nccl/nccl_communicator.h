// The NCCL communicator: collectives between GPUs on device (GPU) buffers, one
// rank per GPU: the job's training tasks (one GPU each), or the GPUs of one
// process (mirrored, one replica per GPU). Built only where CUDA and NCCL are
// (comm::kNcclBuilt); this header includes no CUDA or NCCL header, so streams
// are passed as void* (a cudaStream_t).
//
// Set-up: rank 0 makes NCCL's unique id and hands it to the others through the
// job's Store (nccl_support.h); every rank then joins with a non-blocking
// ncclCommInitRankConfig, polled with its deadline. One communicator per job
// (per group of ranks), each with its own store prefix.
//
// Streams: every collective runs on the communicator's own CUDA stream. It is
// ordered after the work already issued on the caller's stream (the compute
// stream: an event recorded there, waited for by the NCCL stream) and returns at
// once with an NcclWork, c10d's Work: work.block_stream(compute) makes later
// compute wait for it on the GPU (no host wait), work.wait() waits on the host.
// The buffers must stay allocated until one of the two has been done.
//
// Never blocks forever: every wait polls the collective's event, NCCL's own
// asynchronous error, the caller's "is a peer lost" check (the heartbeats) and
// the deadline. On a lost peer or a passed deadline the communicator is aborted
// (ncclCommAbort) and PeerLost (naming the lost task) or TimeoutError is thrown;
// an NCCL error is CommError with NCCL's texts. After a failure every later call
// throws the same error again.
//
// As a Communicator (the float* calls) it takes float32 device pointers on its
// GPU and waits for each collective; a host pointer is a CommError.
//
// Point-to-point (ncclSend / ncclRecv) differs from Communicator's contract in
// two ways, as NCCL has no tags and no eager sends: the messages of a pair are
// matched in the order they were posted (the tag only names the message in
// errors), and a send completes only once the peer receives. So both ranks must
// post a pair's messages in the same order, and two ranks must not both send to
// each other before receiving: the calls run in order on the communicator's one
// stream, so even the *_async forms would wait for each other until the deadline
// (a send and a recv fused in one ncclGroupStart/End would not; not done here).
// The counts of a send and its recv must be equal (NCCL cannot check them). No
// split() (the default CommError) yet: ncclCommSplit would be its engine.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/nccl/nccl_support.h"

namespace dtrain::rendezvous {
class Store;
}

namespace dtrain::comm {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // this rank's GPU (CUDA device index)
  // Namespace of this communicator's keys in the job's store ("comm/nccl/").
  std::string prefix = "comm/nccl/";
  // Deadline of joining and of every wait, in seconds.
  double timeout_seconds = 60.0;
  // The heartbeats' view: a lost peer aborts every wait at once. May be empty.
  PeerLostCheck peer_lost;
  // The stream the blocking float* calls follow (a cudaStream_t; nullptr: the
  // legacy default stream).
  void* compute_stream = nullptr;
  // make_local_nccl_group: rank i's compute stream (its GPU's), in place of
  // compute_stream; empty: compute_stream for every rank.
  std::vector<void*> compute_streams;
  std::string name = "the NCCL communicator";  // in messages
};

struct NcclState;  // the communicator's NCCL and CUDA handles, shared with its works

// One collective in flight. Copyable; cheap. A default-constructed work is done.
class NcclWork {
 public:
  NcclWork() = default;
  // Waits on the host until the collective finished on the GPU (with the
  // communicator's deadline, lost-peer check and error polling).
  void wait();
  // True once it finished; throws as wait() does when it failed.
  bool done();
  // Makes `stream` (a cudaStream_t) wait on the GPU for the collective; the host
  // does not wait. Use it before reading the result or freeing the buffers there.
  void block_stream(void* stream);

 private:
  friend class NcclCommunicator;
  friend struct NcclState;
  struct Pending;
  NcclWork(std::shared_ptr<NcclState> state, std::shared_ptr<Pending> pending, std::string what);
  std::shared_ptr<NcclState> state_;
  std::shared_ptr<Pending> pending_;  // the event recorded after the collective
  std::string what_;
};

class NcclCommunicator final : public Communicator {
 public:
  // Joins the group: the unique id through `store` (rank 0 makes it), then a
  // non-blocking init polled until options.timeout_seconds. Collective: every
  // rank calls it with the same prefix and size. TimeoutError / PeerLost /
  // CommError as the waits; ConfigError for a device that does not exist.
  NcclCommunicator(rendezvous::Store& store, const NcclOptions& options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  int device() const;
  bool device_buffers() const override { return true; }
  // The device-buffer path of the Communicator interface: all_reduce_async's work.
  std::unique_ptr<DeviceWork> all_reduce_device(void* data, size_t count, ElementType type, ReduceOp op,
                                                void* stream) override;
  std::unique_ptr<DeviceWork> send_device(const void* data, size_t count, ElementType type, int peer,
                                          void* stream) override;
  std::unique_ptr<DeviceWork> recv_device(void* data, size_t count, ElementType type, int peer,
                                          void* stream) override;

  // Asynchronous collectives on device buffers, after the work issued so far on
  // `stream` (a cudaStream_t; nullptr: options.compute_stream). Shapes as in
  // Communicator; kMean divides by size() (ncclAvg).
  NcclWork all_reduce_async(void* data, size_t count, ElementType type, ReduceOp op, void* stream = nullptr);
  NcclWork broadcast_async(void* data, size_t count, ElementType type, int root, void* stream = nullptr);
  NcclWork all_gather_async(const void* in, size_t count, ElementType type, void* out, void* stream = nullptr);
  NcclWork reduce_scatter_async(const void* in, size_t count_per_rank, ElementType type, void* out, ReduceOp op,
                                void* stream = nullptr);
  // ncclSend of data[0..count) to rank `peer` / ncclRecv from it (see the top).
  NcclWork send_async(const void* data, size_t count, ElementType type, int peer, void* stream = nullptr);
  NcclWork recv_async(void* data, size_t count, ElementType type, int peer, void* stream = nullptr);

  // Communicator: float32 device pointers, each call waited for.
  void all_reduce(float* data, size_t count, ReduceOp op) override;
  void broadcast(float* data, size_t count, int root) override;
  void all_gather(const float* in, size_t count, float* out) override;
  void reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) override;
  // A one-element all-reduce, waited for.
  void barrier() override;
  // ncclSend / ncclRecv of float32 device buffers, waited for (matched in order,
  // not by tag: see the top).
  void send(const float* data, size_t count, int peer, uint64_t tag) override;
  void recv(float* data, size_t count, int peer, uint64_t tag) override;
  // Not on float32 device buffers (the rounding would need a kernel here): a
  // CommError saying to all_reduce_async a bfloat16 buffer instead.
  void all_reduce_bfloat16(float* data, size_t count, ReduceOp op) override;

 private:
  friend std::vector<std::unique_ptr<NcclCommunicator>> make_local_nccl_group(const std::vector<int>&,
                                                                              const NcclOptions&);
  explicit NcclCommunicator(std::shared_ptr<NcclState> state);
  std::shared_ptr<NcclState> state_;
};

// One communicator per listed GPU of this process (mirrored with one replica per
// GPU; `dtrain bench allreduce --device gpu`): rank i on devices[i]. Set up
// together (a group of non-blocking inits, NCCL's ncclCommInitAll without its
// unbounded wait) within options.timeout_seconds; options.rank, size, device and
// prefix are ignored. Use each from its own thread (one per GPU).
std::vector<std::unique_ptr<NcclCommunicator>> make_local_nccl_group(const std::vector<int>& devices,
                                                                     const NcclOptions& options);

// "NCCL 2.28.9" (the library's version, as loaded).
std::string nccl_version();

}  // namespace dtrain::comm
