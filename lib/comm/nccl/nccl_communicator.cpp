// Implementation of nccl_communicator.h (CUDA builds with NCCL only): the NCCL
// and CUDA calls behind the communicator; the polling, the unique-id exchange
// and the error texts are nccl_support.h's.
//
// Every NCCL communicator here is non-blocking (config.blocking = 0): a call may
// return ncclInProgress, after which ncclCommGetAsyncError is polled (with the
// deadline and the lost-peer check) until it says ncclSuccess or an error. So no
// NCCL call can hold a thread for longer than the deadline.
#include "comm/nccl/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>

#include "comm/nccl/nccl_cuda.h"
#include "core/error.h"
#include "core/strings.h"
#include "rendezvous/store.h"

namespace dtrain::comm {
namespace {

ncclDataType_t to_nccl(ElementType type) { return type == ElementType::kBfloat16 ? ncclBfloat16 : ncclFloat32; }
ncclRedOp_t to_nccl(ReduceOp op) { return op == ReduceOp::kMean ? ncclAvg : ncclSum; }

// The number of GPUs, or ConfigError saying why there is none usable.
int gpu_count(const std::string& who) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw ConfigError(str(who, ": no usable GPU: ", cudaGetErrorName(status), " (", cudaGetErrorString(status),
                          "); NCCL needs a GPU and its driver"));
  }
  return count;
}

}  // namespace


std::string nccl_version() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "NCCL (version unknown)";
  return str("NCCL ", version / 10000, ".", version % 10000 / 100, ".", version % 100);
}

// The handles of one rank, shared by its communicator and its works, so a work
// outliving the communicator still finds them. Destroyed with the last owner.
struct NcclState {
  NcclOptions options;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;  // every collective of this rank
  cudaEvent_t ready = nullptr;    // recorded on the caller's stream before each collective
  float* scratch = nullptr;       // the barrier's one element
  std::mutex launch_mutex;        // one collective enqueued at a time
  std::mutex failure_mutex;
  std::optional<CommFailure> failure;  // guarded by failure_mutex; set once, then every call throws it

  explicit NcclState(const NcclOptions& o) : options(o) {}

  std::string where() const {
    return str(options.name, " (rank ", options.rank, " of ", options.size, ", cuda:", options.device, ")");
  }

  // Creates the stream, the ready event and the barrier's buffer on the rank's GPU.
  void create_handles() {
    const std::string w = where();
    DeviceGuard guard(options.device, w);
    check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", w);
    check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreateWithFlags", w);
    check_cuda(cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(float)), "cudaMalloc", w);
  }

  ~NcclState() {
    if (comm) close_comm();
    if (scratch) cudaFree(scratch);
    if (ready) cudaEventDestroy(ready);
    if (stream) cudaStreamDestroy(stream);
  }

  // Throws the recorded failure, if any.
  void check_usable() {
    std::lock_guard<std::mutex> lock(failure_mutex);
    if (failure) failure->raise();
  }

  // Aborts the communicator (its kernels on every GPU of this rank stop), records
  // `f` (the first failure wins) and throws it.
  [[noreturn]] void fail(const CommFailure& f) {
    std::lock_guard<std::mutex> lock(failure_mutex);
    if (!failure) {
      failure = f;
      if (comm) ncclCommAbort(comm);
      comm = nullptr;
    }
    failure->raise();
  }

  std::string nccl_text(ncclResult_t result, const char* call) const {
    const char* last = comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr);
    return nccl_error_message(call, static_cast<int>(result), ncclGetErrorString(result), last ? last : "", where());
  }

  // NCCL's asynchronous error, when there is one (not ncclSuccess nor ncclInProgress).
  std::optional<std::string> async_error(ncclResult_t* state) {
    std::lock_guard<std::mutex> lock(failure_mutex);
    if (!comm) return str(where(), " was aborted");
    *state = ncclSuccess;
    const ncclResult_t status = ncclCommGetAsyncError(comm, state);
    if (status != ncclSuccess) return nccl_text(status, "ncclCommGetAsyncError");
    if (*state == ncclSuccess || *state == ncclInProgress) return std::nullopt;
    return nccl_text(*state, "a collective (asynchronous error)");
  }

  // The result of a non-blocking NCCL call: ncclInProgress is polled until the
  // communicator is ready (within the deadline); an error aborts and throws.
  void settle(ncclResult_t result, const char* call) {
    if (result == ncclSuccess) return;
    if (result != ncclInProgress) fail({CommFailure::Kind::kBackend, nccl_text(result, call)});
    ncclResult_t state = ncclInProgress;
    CollectivePoll poll;
    poll.finished = [&] { return state == ncclSuccess; };
    poll.backend_error = [&] { return async_error(&state); };
    poll.peer_lost = options.peer_lost;
    if (auto f = poll_until_finished(str(call, " on ", where()), poll, options.timeout_seconds)) fail(*f);
  }

  // Waits on the host for `event` (recorded on the NCCL stream after a collective).
  void wait_event(cudaEvent_t event, const std::string& what) {
    check_usable();
    DeviceGuard guard(options.device, where());
    cudaError_t query = cudaErrorNotReady;
    ncclResult_t state = ncclSuccess;
    CollectivePoll poll;
    poll.finished = [&] { return (query = cudaEventQuery(event)) == cudaSuccess; };
    poll.backend_error = [&]() -> std::optional<std::string> {
      if (query != cudaErrorNotReady)
        return str("CUDA error ", cudaGetErrorName(query), " (", cudaGetErrorString(query), ") in cudaEventQuery");
      return async_error(&state);
    };
    poll.peer_lost = options.peer_lost;
    if (auto f = poll_until_finished(str(what, " on ", where()), poll, options.timeout_seconds)) fail(*f);
  }

  // Closes a communicator that did not fail: flush and destroy within the
  // deadline, else abort. Never throws (called from the destructor).
  void close_comm() noexcept {
    options.peer_lost = nullptr;  // whatever it looks at may be gone by now
    try {
      DeviceGuard guard(options.device, where());
      settle(ncclCommFinalize(comm), "ncclCommFinalize");
      ncclCommDestroy(comm);
    } catch (const std::exception&) {
      if (comm) ncclCommAbort(comm);  // fail() has aborted it already when it threw
    }
    comm = nullptr;
  }

  // Every pointer handed to a collective must be memory on this rank's GPU.
  void check_on_device(const void* p, const char* what) const {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
      (void)cudaGetLastError();
      attributes.type = cudaMemoryTypeUnregistered;
    }
    const bool on_gpu = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
    if (!on_gpu || attributes.device != options.device)
      throw CommError(str(where(), ": the ", what, " buffer is not memory on cuda:", options.device,
                          " (NCCL collectives take device buffers of the rank's GPU)"));
  }

  // Enqueues one collective on the NCCL stream after the work issued on `caller`.
  template <class Enqueue>
  NcclWork launch(std::shared_ptr<NcclState> self, const std::string& what, void* caller, Enqueue enqueue);
};

struct NcclWork::Pending {
  cudaEvent_t done = nullptr;
  std::atomic<bool> finished{false};
  ~Pending() {
    if (done) cudaEventDestroy(done);
  }
};

template <class Enqueue>
NcclWork NcclState::launch(std::shared_ptr<NcclState> self, const std::string& what, void* caller, Enqueue enqueue) {
  std::lock_guard<std::mutex> lock(launch_mutex);
  check_usable();
  const std::string w = where();
  DeviceGuard guard(options.device, w);
  auto pending = std::make_shared<NcclWork::Pending>();
  check_cuda(cudaEventCreateWithFlags(&pending->done, cudaEventDisableTiming), "cudaEventCreateWithFlags", w);
  // The inputs are ready once the caller's (compute) stream reaches this point:
  // the NCCL stream waits for that on the GPU, the host does not.
  cudaStream_t after = static_cast<cudaStream_t>(caller ? caller : options.compute_stream);
  check_cuda(cudaEventRecord(ready, after), "cudaEventRecord", w);
  check_cuda(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent", w);
  ncclComm_t current = nullptr;
  {
    std::lock_guard<std::mutex> failure_lock(failure_mutex);
    current = comm;
  }
  settle(enqueue(current, stream), what.c_str());
  // The work's event: the compute stream (block_stream) or the host (wait) waits for it.
  check_cuda(cudaEventRecord(pending->done, stream), "cudaEventRecord", w);
  return NcclWork(std::move(self), std::move(pending), what);
}

NcclWork::NcclWork(std::shared_ptr<NcclState> state, std::shared_ptr<Pending> pending, std::string what)
    : state_(std::move(state)), pending_(std::move(pending)), what_(std::move(what)) {}

void NcclWork::wait() {
  if (!pending_ || pending_->finished) return;
  state_->wait_event(pending_->done, what_);
  pending_->finished = true;
}

bool NcclWork::done() {
  if (!pending_ || pending_->finished) return true;
  state_->check_usable();
  DeviceGuard guard(state_->options.device, state_->where());
  const cudaError_t query = cudaEventQuery(pending_->done);
  if (query == cudaSuccess) return pending_->finished = true;
  if (query != cudaErrorNotReady)
    state_->fail({CommFailure::Kind::kBackend, str(what_, " on ", state_->where(), ": CUDA error ",
                                                   cudaGetErrorName(query), " in cudaEventQuery")});
  ncclResult_t state = ncclSuccess;
  if (auto error = state_->async_error(&state)) state_->fail({CommFailure::Kind::kBackend, *error});
  if (state_->options.peer_lost)
    if (auto lost = state_->options.peer_lost())
      state_->fail({CommFailure::Kind::kPeerLost, str(*lost, " (", what_, " was aborted)")});
  return false;
}

void NcclWork::block_stream(void* stream) {
  if (!pending_ || pending_->finished) return;
  state_->check_usable();
  DeviceGuard guard(state_->options.device, state_->where());
  check_cuda(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), pending_->done, 0), "cudaStreamWaitEvent",
             state_->where());
}

namespace {

std::shared_ptr<NcclState> new_state(const NcclOptions& options) {
  auto state = std::make_shared<NcclState>(options);
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size)
    throw ConfigError(str(state->where(), ": rank ", options.rank, " is not in a group of ", options.size));
  const int gpus = gpu_count(options.name);
  if (options.device < 0 || options.device >= gpus)
    throw ConfigError(str(state->where(), ": there is no cuda:", options.device, " (this machine has ", gpus,
                          " GPU(s))"));
  state->create_handles();
  return state;
}

ncclConfig_t non_blocking_config() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

}  // namespace

NcclCommunicator::NcclCommunicator(std::shared_ptr<NcclState> state) : state_(std::move(state)) {}

NcclCommunicator::NcclCommunicator(rendezvous::Store& store, const NcclOptions& options)
    : state_(new_state(options)) {
  NcclState& s = *state_;
  const std::string bytes = share_unique_id(
      store, options.prefix + "unique_id", options.rank, options.timeout_seconds,
      [&] {
        ncclUniqueId id;
        s.settle(ncclGetUniqueId(&id), "ncclGetUniqueId");
        return std::string(id.internal, sizeof id.internal);
      },
      s.where());
  ncclUniqueId id;
  if (bytes.size() != sizeof id.internal)
    throw CommError(str(s.where(), ": the NCCL unique id in the store has ", bytes.size(), " bytes, not ",
                        sizeof id.internal));
  std::copy(bytes.begin(), bytes.end(), id.internal);
  DeviceGuard guard(options.device, s.where());
  ncclConfig_t config = non_blocking_config();
  s.settle(ncclCommInitRankConfig(&s.comm, options.size, id, options.rank, &config), "ncclCommInitRankConfig");
}

NcclCommunicator::~NcclCommunicator() = default;

int NcclCommunicator::rank() const { return state_->options.rank; }
int NcclCommunicator::size() const { return state_->options.size; }
int NcclCommunicator::device() const { return state_->options.device; }

namespace {

// NcclWork behind the Communicator interface's DeviceWork.
class NcclDeviceWork final : public DeviceWork {
 public:
  explicit NcclDeviceWork(NcclWork work) : work_(std::move(work)) {}
  void wait() override { work_.wait(); }
  void block_stream(void* stream) override { work_.block_stream(stream); }
  bool done() override { return work_.done(); }

 private:
  NcclWork work_;
};

}  // namespace

std::unique_ptr<DeviceWork> NcclCommunicator::all_reduce_device(void* data, size_t count, ElementType type,
                                                                 ReduceOp op, void* stream) {
  return std::make_unique<NcclDeviceWork>(all_reduce_async(data, count, type, op, stream));
}

std::unique_ptr<DeviceWork> NcclCommunicator::send_device(const void* data, size_t count, ElementType type, int peer,
                                                          void* stream) {
  return std::make_unique<NcclDeviceWork>(send_async(data, count, type, peer, stream));
}

std::unique_ptr<DeviceWork> NcclCommunicator::recv_device(void* data, size_t count, ElementType type, int peer,
                                                          void* stream) {
  return std::make_unique<NcclDeviceWork>(recv_async(data, count, type, peer, stream));
}

NcclWork NcclCommunicator::all_reduce_async(void* data, size_t count, ElementType type, ReduceOp op, void* stream) {
  if (count == 0) return {};
  state_->check_on_device(data, "all_reduce");
  return state_->launch(state_, "ncclAllReduce", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllReduce(data, data, count, to_nccl(type), to_nccl(op), comm, s);
  });
}

NcclWork NcclCommunicator::broadcast_async(void* data, size_t count, ElementType type, int root, void* stream) {
  if (count == 0) return {};
  if (root < 0 || root >= size()) throw CommError(str(state_->where(), ": broadcast from rank ", root, " of ", size()));
  state_->check_on_device(data, "broadcast");
  return state_->launch(state_, "ncclBroadcast", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclBroadcast(data, data, count, to_nccl(type), root, comm, s);
  });
}

NcclWork NcclCommunicator::all_gather_async(const void* in, size_t count, ElementType type, void* out, void* stream) {
  if (count == 0) return {};
  state_->check_on_device(in, "all_gather input");
  state_->check_on_device(out, "all_gather output");
  return state_->launch(state_, "ncclAllGather", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclAllGather(in, out, count, to_nccl(type), comm, s);
  });
}

NcclWork NcclCommunicator::reduce_scatter_async(const void* in, size_t count_per_rank, ElementType type, void* out,
                                                ReduceOp op, void* stream) {
  if (count_per_rank == 0) return {};
  state_->check_on_device(in, "reduce_scatter input");
  state_->check_on_device(out, "reduce_scatter output");
  return state_->launch(state_, "ncclReduceScatter", stream, [&](ncclComm_t comm, cudaStream_t s) {
    return ncclReduceScatter(in, out, count_per_rank, to_nccl(type), to_nccl(op), comm, s);
  });
}

namespace {

// ncclSend (send) or ncclRecv of data[0..count) with rank `peer`, after the work
// issued on `stream`; `what` names it in errors.
NcclWork launch_point_to_point(NcclCommunicator& self, const std::shared_ptr<NcclState>& state, bool send,
                               void* data, size_t count, ElementType type, int peer, void* stream,
                               const std::string& what) {
  if (peer < 0 || peer >= self.size() || peer == self.rank())
    throw CommError(str(what, " on ", state->where(), ": rank ", peer, " is not another rank of 0..",
                        self.size() - 1));
  if (count == 0) return {};
  state->check_on_device(data, send ? "send" : "recv");
  return state->launch(state, what, stream, [&](ncclComm_t comm, cudaStream_t s) {
    return send ? ncclSend(data, count, to_nccl(type), peer, comm, s)
                : ncclRecv(data, count, to_nccl(type), peer, comm, s);
  });
}

}  // namespace

NcclWork NcclCommunicator::send_async(const void* data, size_t count, ElementType type, int peer, void* stream) {
  // ncclSend only reads the buffer; one helper serves both directions.
  return launch_point_to_point(*this, state_, true, const_cast<void*>(data), count, type, peer, stream,
                               str("ncclSend to rank ", peer));
}

NcclWork NcclCommunicator::recv_async(void* data, size_t count, ElementType type, int peer, void* stream) {
  return launch_point_to_point(*this, state_, false, data, count, type, peer, stream,
                               str("ncclRecv from rank ", peer));
}

void NcclCommunicator::send(const float* data, size_t count, int peer, uint64_t tag) {
  check_point_to_point("send", peer, tag, state_->where());
  launch_point_to_point(*this, state_, true, const_cast<float*>(data), count, ElementType::kFloat32, peer, nullptr,
                        str("ncclSend to rank ", peer, " (tag ", tag, ")"))
      .wait();
}

void NcclCommunicator::recv(float* data, size_t count, int peer, uint64_t tag) {
  check_point_to_point("recv", peer, tag, state_->where());
  launch_point_to_point(*this, state_, false, data, count, ElementType::kFloat32, peer, nullptr,
                        str("ncclRecv from rank ", peer, " (tag ", tag, ")"))
      .wait();
}

void NcclCommunicator::all_reduce(float* data, size_t count, ReduceOp op) {
  all_reduce_async(data, count, ElementType::kFloat32, op).wait();
}
void NcclCommunicator::broadcast(float* data, size_t count, int root) {
  broadcast_async(data, count, ElementType::kFloat32, root).wait();
}
void NcclCommunicator::all_gather(const float* in, size_t count, float* out) {
  all_gather_async(in, count, ElementType::kFloat32, out).wait();
}
void NcclCommunicator::reduce_scatter(const float* in, size_t count_per_rank, float* out, ReduceOp op) {
  reduce_scatter_async(in, count_per_rank, ElementType::kFloat32, out, op).wait();
}
void NcclCommunicator::all_reduce_bfloat16(float*, size_t, ReduceOp) {
  throw CommError(str(state_->where(), ": all_reduce_bfloat16 of a float32 device buffer is not done here; convert "
                      "the gradients to a bfloat16 device buffer and call all_reduce_async(..., ElementType::kBfloat16, ...)"));
}

void NcclCommunicator::barrier() {
  // Ordered after nothing in particular: the NCCL stream's own order suffices.
  NcclWork work = state_->launch(state_, "barrier (ncclAllReduce of one float)", state_->stream,
                                 [&](ncclComm_t comm, cudaStream_t s) {
                                   return ncclAllReduce(state_->scratch, state_->scratch, 1, ncclFloat32, ncclSum,
                                                        comm, s);
                                 });
  work.wait();
}

std::vector<std::unique_ptr<NcclCommunicator>> make_local_nccl_group(const std::vector<int>& devices,
                                                                     const NcclOptions& options) {
  if (devices.empty()) throw ConfigError(str(options.name, ": no GPU to put a rank on"));
  const int n = static_cast<int>(devices.size());
  std::vector<std::shared_ptr<NcclState>> states;
  for (int i = 0; i < n; ++i) {
    NcclOptions o = options;
    o.rank = i;
    o.size = n;
    o.device = devices[static_cast<size_t>(i)];
    if (static_cast<size_t>(i) < options.compute_streams.size()) o.compute_stream = options.compute_streams[i];
    states.push_back(new_state(o));
  }
  NcclState& first = *states.front();
  ncclUniqueId id;
  first.settle(ncclGetUniqueId(&id), "ncclGetUniqueId");
  {
    // One group of non-blocking inits, one per GPU (what ncclCommInitAll does,
    // but with every wait bounded): the group returns ncclInProgress and each
    // communicator is then polled until it is ready.
    ncclConfig_t config = non_blocking_config();
    first.settle(ncclGroupStart(), "ncclGroupStart");
    for (int i = 0; i < n; ++i) {
      NcclState& s = *states[static_cast<size_t>(i)];
      DeviceGuard guard(s.options.device, s.where());  // NCCL takes the rank's GPU from the current device
      const ncclResult_t r = ncclCommInitRankConfig(&s.comm, n, id, i, &config);
      if (r != ncclSuccess && r != ncclInProgress) {
        (void)ncclGroupEnd();
        s.settle(r, "ncclCommInitRankConfig");
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    if (end != ncclSuccess && end != ncclInProgress) first.settle(end, "ncclGroupEnd");
  }
  for (auto& s : states) s->settle(ncclInProgress, "ncclCommInitRankConfig");
  std::vector<std::unique_ptr<NcclCommunicator>> group;
  for (auto& s : states) group.push_back(std::unique_ptr<NcclCommunicator>(new NcclCommunicator(s)));
  return group;
}

}  // namespace dtrain::comm
