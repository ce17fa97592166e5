// StageLinks: how a pipeline stage's activations and their gradients reach the
// neighbouring stages (pipeline.h). Two kinds:
//
// - Host links (every build): Communicator::send/recv on the copy's Gloo group,
//   matched by tag. Sends go to a sender thread, so a stage never blocks on one
//   (two neighbours sending to each other at once cannot deadlock). A GPU
//   stage's tensors go through a host copy on each side.
// - NCCL links (CUDA builds with NCCL, every stage of the copy on a GPU of its
//   own): ncclSend / ncclRecv on device buffers, no host copy. NCCL matches the
//   messages of a pair by order, not by tag, and a send waits for its receive.
//   So each neighbouring pair gets two NCCL groups of two ranks, one per
//   direction: each carries one ordered stream of messages (the activations go
//   forward in micro-batch order, the gradients back in micro-batch order, and
//   both sides post them in that order under either schedule). Sends are
//   asynchronous (the tensor is kept until drain()); receives wait, with the
//   communicator's deadline and lost-peer check.
//
// Every receive waits at most the communicators' deadline; a lost neighbour ends
// it at once (PeerLost) where the backend sees the connection close.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace dtrain::strategy {

class StageLinks {
 public:
  virtual ~StageLinks() = default;

  // "gloo (host copies)", "gloo", "nccl": for the log and the summary.
  virtual std::string name() const = 0;
  // Hands `data` (on this stage's device) to stage `peer` (this stage - 1 or + 1)
  // under `tag`; returns without waiting for the peer. `data` must not change
  // until drain() (the links may keep it rather than copy it).
  virtual void send(const Tensor& data, int peer, uint64_t tag) = 0;
  // The tensor of `shape` that stage `peer` sent under `tag`, on this stage's device.
  virtual Tensor receive(const Shape& shape, int peer, uint64_t tag) = 0;
  // Waits until every send was taken (or failed: rethrows the first failure).
  virtual void drain() = 0;
};

// Host links over `pipe` (the copy's group, rank = stage), for tensors on `device`.
std::unique_ptr<StageLinks> make_host_links(comm::Communicator& pipe, const Device& device);

// Connects a two-rank NCCL group on this task's GPU under `name` (a key prefix
// in the job's store, the same on both sides); `rank` 0 is the earlier stage.
using DevicePairConnector = std::function<std::unique_ptr<comm::Communicator>(const std::string& name, int rank)>;

// NCCL links of stage `stage` of `stages` in pipeline copy `copy` on GPU
// `device`, each group made by `connect`. Collective over the copy: the groups are connected pair by
// pair in stage order (pair s-1|s before s|s+1), so no two stages wait on each
// other. CUDA builds with NCCL only (elsewhere an InternalError).
std::unique_ptr<StageLinks> make_nccl_links(int stage, int stages, int copy, const Device& device,
                                            const DevicePairConnector& connect);

// The NCCL links of this task's stage where every stage of its pipeline copy
// has a GPU of its own, else nullptr (the stages then use host links). The
// training tasks compare their GPUs first: collective over `workers` (every
// training task, rank = task rank; `stages` stages per copy, ParallelGrid's
// order). The runtime calls it where the plan says NCCL may link the stages and
// hands the strategy the result (StrategyContext::stage_links).
// `nccl_hostid`: NCCL_HOSTID as the Environment read it (nullopt: unset).
std::unique_ptr<StageLinks> connect_nccl_links_if_distinct(comm::Communicator& workers, int stages,
                                                           const Device& device,
                                                           const std::optional<std::string>& nccl_hostid,
                                                           const DevicePairConnector& connect);

// Whether NCCL may link a copy's stages: every stage on a GPU (a non-empty
// identity) and no two on the same one (NCCL refuses two ranks on one GPU).
// identities[s]: stage s's device identity (device_identity()).
bool stages_on_distinct_gpus(const std::vector<std::string>& identities);

// The machine as NCCL sees it: "NCCL_HOSTID=<value>" when NCCL_HOSTID is set and
// not empty (`nccl_hostid`, as the Environment read it; NCCL then takes it for
// the host), else core/host.h's host_identity().
std::string nccl_host_identity(const std::optional<std::string>& nccl_hostid);

// This task's device as other tasks can compare it: "" for the CPU, else the
// machine (nccl_host_identity()) and the GPU's PCI bus id.
std::string device_identity(const Device& device, const std::optional<std::string>& nccl_hostid);

}  // namespace dtrain::strategy
