// The backends of the Communicator conformance suite (test_collective_conformance.cpp,
// issue 33): every communicator dtrain has, each as a factory that makes a group
// of n ranks on threads of this process and runs one body per rank, and what the
// backend documents it does not do (the suite then checks the documented error,
// so a gap is never silent). As ggml's test-backend-ops runs every op on every
// backend, the suite runs every op on every row of backends().
//
//   gloo                      Gloo over TCP on 127.0.0.1, ranks meet through an InMemoryStore
//   local                     the in-process group (make_local_group)
//   shm                       shared memory (make_shm_communicator), small slots: large
//                             collectives go in many chunks
//   hierarchical (2 hosts x k) make_hierarchical_communicator over a shared-memory group
//                             per "host" and a Gloo group of the two leaders, ranks of
//                             the two hosts interleaved (host of rank r: r % 2), as
//                             lib/runtime/cluster_task.cpp builds it
//   nccl                      make_local_nccl_group, one GPU per rank, behind a host-staging
//                             adapter (the bodies hand host memory; the adapter copies it
//                             to the rank's GPU and back around each NCCL call). Only in
//                             builds with NCCL and where a GPU is usable; otherwise
//                             nccl_availability() says why.
//
// Every wait of every backend has the deadline kTimeoutSeconds (as groups.h), so a
// failing case ends with an error, never a hang.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/local/local_communicator.h"
#include "comm/nccl/nccl_support.h"
#include "comm/shm/shm_communicator.h"
#include "core/error.h"
#include "core/strings.h"
#include "rendezvous/store.h"
#include "support/rank_threads.h"

#if DTRAIN_CONFORMANCE_NCCL
#include <cuda_runtime.h>

#include "comm/nccl/nccl_communicator.h"
#endif

namespace dtrain::test::conformance {

// The deadline of every wait (Gloo's collectives, the local group's and shared
// memory's rendezvous, NCCL's polls): tests/unit/comm/groups.h's.
inline constexpr double kTimeoutSeconds = 30.0;

// Floats per member slot of the shared-memory groups: a prime, so the chunks of
// the larger collectives (2^16 floats and more) end at odd places.
inline constexpr size_t kShmSlotFloats = 4093;

// How a backend does point-to-point messages.
enum class PointToPoint {
  kNone,     // send/recv are Communicator's defaults: CommError "has no point-to-point messages"
  kByTag,    // the interface's contract: matched by tag, eager sends
  kInOrder,  // NCCL (nccl_communicator.h): matched in posting order, a send waits for its recv
};

// One rank's body: "" when all was well, else the problems (rank_threads.h).
using RankBody = std::function<std::string(comm::Communicator& c)>;

struct Backend {
  std::string name;
  std::vector<int> sizes;  // the group sizes it runs with
  PointToPoint p2p = PointToPoint::kByTag;
  bool splits = true;             // else split() throws CommError "cannot be split into sub-groups"
  bool bfloat16 = true;           // else all_reduce_bfloat16 throws CommError naming it (NCCL)
  bool host_pieces = true;        // else all_reduce_pieces of host pieces throws CommError (NCCL)
  bool pieces_in_place = false;   // what reduces_pieces_in_place() must say
  bool shared_area = false;       // whether shared_area() gives memory (else nullptr)
  // Makes a group of n ranks and runs body on a thread per rank: every rank's problem.
  std::function<std::vector<std::string>(int n, const RankBody& body)> run;
};

// A job id no other run of this process (or another process) shares: it names
// the shared-memory segments.
inline std::string unique_job_id() {
  static std::atomic<int> runs{0};
  return str("conformance-", ::getpid(), "-", runs++);
}

// The communicator rank r of n got must say so.
inline std::string check_identity(const comm::Communicator& c, int r, int n) {
  if (c.rank() != r || c.size() != n)
    return str("rank ", r, " of ", n, " got a communicator that says rank ", c.rank(), " of ", c.size(), "; ");
  return "";
}

inline std::vector<std::string> run_gloo(int n, const RankBody& body) {
  rendezvous::InMemoryStore store;  // outlives every communicator, split ones too
  return run_on_threads(n, [&](int r) -> std::string {
    comm::GlooOptions o;
    o.rank = r;
    o.size = n;
    o.prefix = "conformance/gloo/";
    o.timeout_seconds = kTimeoutSeconds;
    auto c = comm::make_gloo_communicator(store, o);
    return check_identity(*c, r, n) + body(*c);
  });
}

inline std::vector<std::string> run_local(int n, const RankBody& body) {
  auto group = comm::make_local_group(n, kTimeoutSeconds);
  return run_on_threads(n, [&](int r) -> std::string {
    // Owned by the rank's thread: a body that throws destroys it, and the others
    // get PeerLost at once rather than waiting for the deadline.
    std::unique_ptr<comm::Communicator> c = std::move(group[static_cast<size_t>(r)]);
    return check_identity(*c, r, n) + body(*c);
  });
}

inline comm::ShmOptions shm_options(int rank, int size, const std::string& prefix, const std::string& job) {
  comm::ShmOptions o;
  o.rank = rank;
  o.size = size;
  o.prefix = prefix;
  o.job_id = job;
  o.timeout_seconds = kTimeoutSeconds;
  o.capacity_floats = kShmSlotFloats;
  return o;
}

inline std::vector<std::string> run_shm(int n, const RankBody& body) {
  rendezvous::InMemoryStore store;
  const std::string job = unique_job_id();
  return run_on_threads(n, [&](int r) -> std::string {
    auto c = comm::make_shm_communicator(store, shm_options(r, n, "conformance/shm/", job));
    return check_identity(*c, r, n) + body(*c);
  });
}

// Two "hosts" of n / 2 ranks each, interleaved: rank r is on host r % 2.
inline std::vector<std::string> run_hierarchical(int n, const RankBody& body) {
  std::vector<std::string> keys;
  for (int r = 0; r < n; ++r) keys.push_back(r % 2 == 0 ? "host-a" : "host-b");
  const comm::HostLayout layout = comm::HostLayout::from_keys(keys);
  rendezvous::InMemoryStore store;
  const std::string job = unique_job_id();
  return run_on_threads(n, [&](int r) -> std::string {
    const int host = layout.host_of[static_cast<size_t>(r)];
    const int local_rank = layout.local_rank_of[static_cast<size_t>(r)];
    const int per_host = static_cast<int>(std::count(layout.host_of.begin(), layout.host_of.end(), host));
    auto local = comm::make_shm_communicator(
        store, shm_options(local_rank, per_host, str("conformance/hierarchical/host", host, "/"), job));
    std::unique_ptr<comm::Communicator> leaders;
    if (local_rank == 0) {
      comm::GlooOptions g;
      g.rank = host;
      g.size = layout.hosts();
      g.prefix = "conformance/hierarchical/leaders/";
      g.timeout_seconds = kTimeoutSeconds;
      leaders = comm::make_gloo_communicator(store, g);
    }
    auto c = comm::make_hierarchical_communicator(r, layout, std::move(local), std::move(leaders));
    return check_identity(*c, r, n) + body(*c);
  });
}

// Whether the nccl row is in the table: the group sizes it can run (one GPU per
// rank: NCCL refuses two ranks of a communicator on one GPU), or why none.
struct NcclAvailability {
  std::vector<int> sizes;
  std::string why_not;
};

#if DTRAIN_CONFORMANCE_NCCL

inline void cuda_ok(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw RuntimeError(str("CUDA ", what, ": ", cudaGetErrorString(status)));
}

inline const NcclAvailability& nccl_availability() {
  static const NcclAvailability availability = []() -> NcclAvailability {
    int gpus = 0;
    const cudaError_t status = cudaGetDeviceCount(&gpus);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      return {{}, str("no usable GPU (cudaGetDeviceCount: ", cudaGetErrorString(status), ")")};
    }
    if (gpus < 1) return {{}, "no usable GPU (no CUDA device)"};
    NcclAvailability a;
    for (const int n : {2, 4})
      if (n <= gpus) a.sizes.push_back(n);
    if (a.sizes.empty()) {
      a.sizes.push_back(1);  // one GPU: a group of one rank is all NCCL allows
      std::printf("conformance: nccl runs with 1 rank only (1 GPU; NCCL needs one GPU per rank)\n");
    }
    return a;
  }();
  return availability;
}

// `count` floats on GPU `device`, copied from host memory and back.
class DeviceFloats {
 public:
  DeviceFloats(int device, const float* host, size_t count) : count_(count) {
    cuda_ok(cudaSetDevice(device), "cudaSetDevice");
    void* p = nullptr;
    cuda_ok(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(float)), "cudaMalloc");
    data_ = static_cast<float*>(p);
    if (host != nullptr && count > 0)
      cuda_ok(cudaMemcpy(data_, host, count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy to the GPU");
  }
  ~DeviceFloats() { cudaFree(data_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* get() const { return data_; }
  void read(float* host) const {
    if (count_ > 0)
      cuda_ok(cudaMemcpy(host, data_, count_ * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy from the GPU");
  }

 private:
  size_t count_;
  float* data_ = nullptr;
};

// The NCCL communicator behind host memory: each call copies its buffers to the
// rank's GPU, makes the NCCL communicator's own (waited-for) call on them and
// copies the results back. What NCCL does not do reaches it unchanged:
// all_reduce_bfloat16 (CommError: float32 device buffers are not rounded there),
// all_reduce_pieces (Communicator's default, which packs the pieces on the host
// and so hands NCCL a host buffer: CommError), split (CommError).
class HostStagedNccl final : public comm::Communicator {
 public:
  using Communicator::all_reduce;
  using Communicator::broadcast;

  explicit HostStagedNccl(comm::NcclCommunicator& nccl) : nccl_(nccl) {}
  int rank() const override { return nccl_.rank(); }
  int size() const override { return nccl_.size(); }

  void all_reduce(float* data, size_t count, comm::ReduceOp op) override {
    DeviceFloats d(device(), data, count);
    nccl_.all_reduce(d.get(), count, op);
    d.read(data);
  }
  void all_reduce_bfloat16(float* data, size_t count, comm::ReduceOp op) override {
    DeviceFloats d(device(), data, count);
    nccl_.all_reduce_bfloat16(d.get(), count, op);
    d.read(data);
  }
  void all_reduce_pieces(std::span<const comm::Piece> pieces, comm::ReduceOp op) override {
    nccl_.all_reduce_pieces(pieces, op);
  }
  bool reduces_pieces_in_place() const override { return nccl_.reduces_pieces_in_place(); }
  std::shared_ptr<float> shared_area(size_t floats) override { return nccl_.shared_area(floats); }
  void broadcast(float* data, size_t count, int root) override {
    DeviceFloats d(device(), data, count);
    nccl_.broadcast(d.get(), count, root);
    d.read(data);
  }
  void all_gather(const float* in, size_t count, float* out) override {
    DeviceFloats i(device(), in, count), o(device(), nullptr, count * static_cast<size_t>(size()));
    nccl_.all_gather(i.get(), count, o.get());
    o.read(out);
  }
  void reduce_scatter(const float* in, size_t count_per_rank, float* out, comm::ReduceOp op) override {
    DeviceFloats i(device(), in, count_per_rank * static_cast<size_t>(size())), o(device(), nullptr, count_per_rank);
    nccl_.reduce_scatter(i.get(), count_per_rank, o.get(), op);
    o.read(out);
  }
  void barrier() override { nccl_.barrier(); }
  void send(const float* data, size_t count, int peer, uint64_t tag) override {
    DeviceFloats d(device(), data, count);
    nccl_.send(d.get(), count, peer, tag);
  }
  void recv(float* data, size_t count, int peer, uint64_t tag) override {
    DeviceFloats d(device(), nullptr, count);
    nccl_.recv(d.get(), count, peer, tag);
    d.read(data);
  }
  std::unique_ptr<Communicator> split(int color, int key) override { return nccl_.split(color, key); }

 private:
  int device() const { return nccl_.device(); }
  comm::NcclCommunicator& nccl_;
};

inline std::vector<std::string> run_nccl(int n, const RankBody& body) {
  std::vector<int> devices(static_cast<size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);
  comm::NcclOptions o;
  o.timeout_seconds = kTimeoutSeconds;
  o.name = "the conformance NCCL group";
  // Destroyed here, after every thread is done (as tests/gpu/test_gpu_nccl.cpp does).
  auto group = comm::make_local_nccl_group(devices, o);
  return run_on_threads(n, [&](int r) -> std::string {
    cuda_ok(cudaSetDevice(r), "cudaSetDevice");
    HostStagedNccl c(*group[static_cast<size_t>(r)]);
    return check_identity(c, r, n) + body(c);
  });
}

#else

inline const NcclAvailability& nccl_availability() {
  static const NcclAvailability availability{
      {}, comm::kNcclBuilt ? "this test was built without dtrain_comm_nccl" : "this build has no NCCL (no CUDA/NCCL found)"};
  return availability;
}

#endif

// The table: every backend this build and machine can run.
inline const std::vector<Backend>& backends() {
  static const std::vector<Backend> table = [] {
    std::vector<Backend> t;
    t.push_back(Backend{"gloo", {2, 4}, PointToPoint::kByTag, true, true, true, false, false, run_gloo});
    t.push_back(Backend{"local", {2, 4}, PointToPoint::kByTag, true, true, true, false, false, run_local});
    // Shared memory and the hierarchical group have no send/recv and no split
    // (Communicator's defaults). Shared memory reduces pieces where they lie and
    // has a shared area; the hierarchical group only on one host (here: two).
    t.push_back(Backend{"shm", {2, 4}, PointToPoint::kNone, false, true, true, true, true, run_shm});
    t.push_back(Backend{"hierarchical (2 hosts x n/2)", {2, 4}, PointToPoint::kNone, false, true, true, false, false,
                        run_hierarchical});
#if DTRAIN_CONFORMANCE_NCCL
    if (!nccl_availability().sizes.empty())
      // nccl_communicator.h: sends matched in order and waiting for the receiver;
      // no split (yet); no all_reduce_bfloat16 of float32 buffers; device buffers
      // only, so the default all_reduce_pieces (host packing) is refused.
      t.push_back(Backend{"nccl", nccl_availability().sizes, PointToPoint::kInOrder, false, false, false, false, false,
                          run_nccl});
#endif
    if (nccl_availability().sizes.empty())
      std::printf("conformance: nccl is not in this run's table: %s\n", nccl_availability().why_not.c_str());
    return t;
  }();
  return table;
}

// "" when call() throws CommError whose message contains `contains`; else what happened.
template <class F>
std::string expect_comm_error(const std::string& what, const std::string& contains, F&& call) {
  try {
    call();
  } catch (const CommError& e) {
    const std::string m = e.what();
    if (m.find(contains) == std::string::npos)
      return str(what, ": CommError without \"", contains, "\": ", m, "; ");
    return "";
  } catch (const std::exception& e) {
    return str(what, ": expected CommError (\"", contains, "\"), got another error: ", e.what(), "; ");
  }
  return str(what, ": returned, expected CommError (\"", contains, "\"); ");
}

}  // namespace dtrain::test::conformance
