// Implementation of pipeline_links.h: the host links (a sender thread over the
// copy's Gloo group) and the NCCL links (two-rank device groups per direction).
#include "strategy/planning/parallel_grid.h"
#include "strategy/parallel/pipeline_links.h"

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/log.h"
#include "core/sha256.h"
#include "core/host.h"
#include "core/strings.h"
#include "core/timer.h"
#include "kernels/device.h"
#include "strategy/planning/pipeline_stages.h"
#if DTRAIN_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#endif

namespace dtrain::strategy {
namespace {

// Sends on a thread of their own, in the order posted. Each message is a host
// tensor of its own. drain() waits for all and rethrows the first failure (a
// send has the communicator's deadline).
class SenderThread {
 public:
  explicit SenderThread(comm::Communicator& comm) : comm_(comm), thread_([this] { loop(); }) {}

  ~SenderThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void post(Tensor data, int peer, uint64_t tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    rethrow_locked();
    queue_.push_back({std::move(data), peer, tag});
    cv_.notify_all();
  }

  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return (queue_.empty() && !busy_) || error_; });
    rethrow_locked();
  }

 private:
  struct Message {
    Tensor data;
    int peer;
    uint64_t tag;
  };

  void rethrow_locked() {
    if (error_) std::rethrow_exception(error_);
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty() || error_) {
        if (stop_) return;
        queue_.clear();
        continue;
      }
      Message m = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        comm_.send(m.data.data(), static_cast<size_t>(m.data.numel()), m.peer, m.tag);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      busy_ = false;
      if (error && !error_) error_ = error;
      cv_.notify_all();
    }
  }

  comm::Communicator& comm_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Message> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: starts after the members it uses
};

class HostLinks final : public StageLinks {
 public:
  HostLinks(comm::Communicator& pipe, const Device& device) : pipe_(pipe), device_(device), sender_(pipe) {}

  std::string name() const override { return device_.is_cpu() ? "gloo" : "gloo (host copies)"; }

  void send(const Tensor& data, int peer, uint64_t tag) override {
    // On the host: the tensor itself (unchanged until drain()) or a copy of a GPU's.
    sender_.post(device_.is_cpu() ? data : data.to_host(), peer, tag);
  }

  Tensor receive(const Shape& shape, int peer, uint64_t tag) override {
    Tensor host(shape);
    pipe_.recv(host.data(), static_cast<size_t>(host.numel()), peer, tag);
    return device_.is_cpu() ? host : host.to(device_);
  }

  void drain() override { sender_.drain(); }

 private:
  comm::Communicator& pipe_;
  Device device_;
  SenderThread sender_;
};

#if DTRAIN_HAVE_NCCL

class NcclLinks final : public StageLinks {
 public:
  NcclLinks(int stage, int stages, int copy, const Device& device, const DevicePairConnector& connect)
      : stage_(stage), device_(device) {
    // Pair by pair in stage order: the one with the previous stage, then the next.
    const auto pair = [&](int first, const char* direction) {
      return connect(str("comm/nccl/pipeline/copy", copy, "/", first, "-", first + 1, "/", direction, "/"),
                     stage == first ? 0 : 1);
    };
    if (stage > 0) {
      forward_in_ = pair(stage - 1, "activations");
      backward_out_ = pair(stage - 1, "gradients");
    }
    if (stage + 1 < stages) {
      forward_out_ = pair(stage, "activations");
      backward_in_ = pair(stage, "gradients");
    }
  }

  ~NcclLinks() override {
    // A send still in flight reads its tensor: wait (bounded) before freeing it.
    try {
      drain();
    } catch (...) {  // the failure was reported by the step that saw it
    }
  }

  std::string name() const override { return "nccl"; }

  void send(const Tensor& data, int peer, uint64_t /*tag*/) override {
    comm::Communicator& group = *(peer > stage_ ? forward_out_ : backward_out_);
    // After the work issued on the compute stream (which produced `data`).
    in_flight_.emplace_back(data, group.send_device(data.raw(), static_cast<size_t>(data.numel()),
                                                    comm::ElementType::kFloat32, peer > stage_ ? 1 : 0, nullptr));
    // Forget the sends already done (their tensors may go).
    while (!in_flight_.empty() && in_flight_.front().second->done()) in_flight_.pop_front();
  }

  Tensor receive(const Shape& shape, int peer, uint64_t /*tag*/) override {
    comm::Communicator& group = *(peer < stage_ ? forward_in_ : backward_in_);
    Tensor t(shape, device_);
    group.recv_device(t.raw(), static_cast<size_t>(t.numel()), comm::ElementType::kFloat32, peer < stage_ ? 0 : 1,
                      nullptr)
        ->wait();
    return t;
  }

  void drain() override {
    while (!in_flight_.empty()) {
      in_flight_.front().second->wait();
      in_flight_.pop_front();
    }
  }

 private:
  int stage_;
  Device device_;
  std::unique_ptr<comm::Communicator> forward_in_, backward_out_;  // with stage - 1
  std::unique_ptr<comm::Communicator> forward_out_, backward_in_;  // with stage + 1
  std::deque<std::pair<Tensor, std::unique_ptr<comm::DeviceWork>>> in_flight_;
};

#endif  // DTRAIN_HAVE_NCCL

}  // namespace

std::unique_ptr<StageLinks> make_host_links(comm::Communicator& pipe, const Device& device) {
  return std::make_unique<HostLinks>(pipe, device);
}

std::unique_ptr<StageLinks> make_nccl_links(int stage, int stages, int copy, const Device& device,
                                            const DevicePairConnector& connect) {
#if DTRAIN_HAVE_NCCL
  DT_CHECK(stages >= 2 && connect && !device.is_cpu(), "NCCL links need two stages on GPUs and a connector");
  return std::make_unique<NcclLinks>(stage, stages, copy, device, connect);
#else
  (void)stage, (void)stages, (void)copy, (void)device, (void)connect;
  DT_CHECK(false, "NCCL links in a build without NCCL");
  return nullptr;
#endif
}

std::unique_ptr<StageLinks> connect_nccl_links_if_distinct(comm::Communicator& workers, int stages,
                                                           const Device& device,
                                                           const std::optional<std::string>& nccl_hostid,
                                                           const DevicePairConnector& connect) {
  // Each task's identity as a SHA-256 (64 hex characters, 16 floats' bytes); the CPU: none.
  const std::string own = device_identity(device, nccl_hostid);
  std::string digest(64, ' ');
  if (!own.empty()) {
    Sha256 h;
    h.update(own);
    digest = h.hex_digest();
  }
  const int tasks = workers.size();
  std::vector<float> all(16 * static_cast<size_t>(tasks));
  float raw[16];
  std::memcpy(raw, digest.data(), sizeof raw);
  workers.all_gather(raw, 16, all.data());
  // The identities of this task's copy's stages, in stage order.
  const ParallelGrid grid(tasks / stages, stages, 1);  // (NCCL links: no tensor parts)
  const GridPlace mine = grid.place(workers.rank());
  std::vector<std::string> identities(static_cast<size_t>(stages));
  for (int r = 0; r < tasks; ++r) {
    const GridPlace place = grid.place(r);
    if (place.copy != mine.copy) continue;
    const std::string id(reinterpret_cast<const char*>(&all[16 * static_cast<size_t>(r)]), 64);
    identities[static_cast<size_t>(place.stage)] = id == std::string(64, ' ') ? "" : id;
  }
  if (!stages_on_distinct_gpus(identities)) {
    if (workers.rank() == 0)
      log::info("pipeline: stages share a GPU (NCCL needs one GPU per rank): activations travel through Gloo, "
                "with host copies");
    return nullptr;
  }
  return make_nccl_links(mine.stage, stages, mine.copy, device, connect);
}

bool stages_on_distinct_gpus(const std::vector<std::string>& identities) {
  std::set<std::string> seen;
  for (const std::string& id : identities)
    if (id.empty() || !seen.insert(id).second) return false;
  return identities.size() >= 2;
}

std::string nccl_host_identity(const std::optional<std::string>& nccl_hostid) {
  // NCCL tells hosts apart by NCCL_HOSTID when it is set (else by hostname and
  // boot id): two processes with different NCCL_HOSTIDs are two hosts to NCCL,
  // which then lets them share a GPU (scripts/gpu-check.sh runs a pipeline's two
  // stages on one GPU that way, with NCCL's shared-memory and P2P paths off).
  if (nccl_hostid && !nccl_hostid->empty()) return str("NCCL_HOSTID=", *nccl_hostid);
  return host_identity();
}

std::string device_identity(const Device& device, const std::optional<std::string>& nccl_hostid) {
  if (device.is_cpu()) return "";
  for (const kernels::GpuInfo& gpu : kernels::list_gpus().gpus)
    if (gpu.index == device.index) return str(nccl_host_identity(nccl_hostid), " ", gpu.pci_bus_id);
  return str(nccl_host_identity(nccl_hostid), " ", device.str());
}

}  // namespace dtrain::strategy
