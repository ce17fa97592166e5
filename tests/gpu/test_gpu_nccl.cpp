// The NCCL communicator on real GPUs (CUDA builds with NCCL; skipped without a
// usable GPU): every collective on device buffers against the same computed on
// the CPU, in float32 and bfloat16, with ranks on threads meeting through the
// chief's store over TCP on loopback (two ranks when the machine has two GPUs,
// else one: NCCL refuses two ranks of one communicator on one GPU); the
// in-process group of one communicator per GPU; a peer that never joins or never
// calls the collective: PeerLost as soon as the heartbeat check says so, or
// TimeoutError at the deadline, never a hang; `dtrain bench allreduce --device gpu`.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/bench_allreduce.h"
#include "comm/nccl/nccl_communicator.h"
#include "core/error.h"
#include "core/timer.h"
#include "gpu/gpu_skip.h"
#include "integration/run_dtrain.h"
#include "kernels/device.h"
#include "rendezvous/store_client.h"
#include "rendezvous/store_server.h"
#include "support/rank_threads.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

int gpu_count() { return static_cast<int>(kernels::list_gpus().gpus.size()); }

void cuda_ok(cudaError_t status) {
  if (status != cudaSuccess) throw RuntimeError(std::string("CUDA: ") + cudaGetErrorString(status));
}

// bfloat16 as its top 16 bits, rounded to nearest even (the values here are exact).
uint16_t to_bf16(float x) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float x = 0;
  std::memcpy(&x, &bits, 4);
  return x;
}

// A buffer on the current GPU holding `values` as `type`; read() brings it back as floats.
struct GpuBuffer {
  comm::ElementType type;
  size_t count;
  void* data = nullptr;
  GpuBuffer(comm::ElementType t, const std::vector<float>& values) : type(t), count(values.size()) {
    cuda_ok(cudaMalloc(&data, count * comm::element_size(type)));
    if (type == comm::ElementType::kFloat32) {
      cuda_ok(cudaMemcpy(data, values.data(), count * 4, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> h(count);
      for (size_t i = 0; i < count; ++i) h[i] = to_bf16(values[i]);
      cuda_ok(cudaMemcpy(data, h.data(), count * 2, cudaMemcpyHostToDevice));
    }
  }
  GpuBuffer(comm::ElementType t, size_t n) : GpuBuffer(t, std::vector<float>(n, -1.0f)) {}
  ~GpuBuffer() { cudaFree(data); }
  std::vector<float> read() const {
    std::vector<float> out(count);
    if (type == comm::ElementType::kFloat32) {
      cuda_ok(cudaMemcpy(out.data(), data, count * 4, cudaMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> h(count);
      cuda_ok(cudaMemcpy(h.data(), data, count * 2, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < count; ++i) out[i] = from_bf16(h[i]);
    }
    return out;
  }
};

// Rank r's data: small integers (and halves after a mean), exact in bfloat16 too.
std::vector<float> rank_values(int rank, size_t count, int salt) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = static_cast<float>((i * 7 + static_cast<size_t>(salt)) % 13) + rank;
  return v;
}

// "" when got == want element for element, else the first difference.
std::string compare(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return what + ": wrong size";
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", the CPU says " +
             std::to_string(want[i]);
  return "";
}

rendezvous::ServerOptions server_for(int ranks) {
  rendezvous::ServerOptions o;
  o.credentials = {"job-nccl-gpu", "s3cret"};
  for (int r = 0; r < ranks; ++r) o.tasks.push_back({"worker:" + std::to_string(r), "127.0.0.1:" + std::to_string(r + 1)});
  o.chief = "worker:0";
  return o;
}

rendezvous::ClientOptions client_for(int rank) {
  rendezvous::ClientOptions o;
  o.credentials = {"job-nccl-gpu", "s3cret"};
  o.task = "worker:" + std::to_string(rank);
  o.connect_timeout = 10.0;
  o.request_timeout = 10.0;
  return o;
}

// Every collective of one rank of `n` against the CPU, in `type`. "" when all agree.
std::string check_collectives(comm::NcclCommunicator& comm, comm::ElementType type, int n) {
  const int rank = comm.rank();
  const size_t count = 1000;
  const std::string t = comm::element_type_name(type);
  std::vector<std::vector<float>> all(static_cast<size_t>(n));  // what every rank holds, as the CPU knows it
  for (int r = 0; r < n; ++r) all[static_cast<size_t>(r)] = rank_values(r, count * static_cast<size_t>(n), 1);
  const std::vector<float>& mine = all[static_cast<size_t>(rank)];
  std::vector<float> sum(count * static_cast<size_t>(n), 0.0f);
  for (const auto& v : all)
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];

  std::vector<std::string> problems;
  {  // all_reduce sum, asynchronous, waited for on the host
    GpuBuffer x(type, std::vector<float>(mine.begin(), mine.begin() + count));
    comm.all_reduce_async(x.data, count, type, comm::ReduceOp::kSum).wait();
    problems.push_back(compare("all_reduce sum " + t, x.read(), std::vector<float>(sum.begin(), sum.begin() + count)));
  }
  {  // all_reduce mean, the default stream made to wait on the GPU
    GpuBuffer x(type, std::vector<float>(mine.begin(), mine.begin() + count));
    comm::NcclWork work = comm.all_reduce_async(x.data, count, type, comm::ReduceOp::kMean);
    work.block_stream(nullptr);
    std::vector<float> mean(sum.begin(), sum.begin() + count);
    for (float& m : mean) m /= static_cast<float>(n);
    problems.push_back(compare("all_reduce mean " + t, x.read(), mean));
    if (!work.done()) problems.push_back("a work not done after its stream waited for it and a copy read the result");
  }
  {  // broadcast from the last rank
    GpuBuffer x(type, std::vector<float>(mine.begin(), mine.begin() + count));
    comm.broadcast_async(x.data, count, type, n - 1).wait();
    const std::vector<float>& root = all[static_cast<size_t>(n - 1)];
    problems.push_back(compare("broadcast " + t, x.read(), std::vector<float>(root.begin(), root.begin() + count)));
  }
  {  // all_gather: rank r's first `count` values at r*count
    GpuBuffer in(type, std::vector<float>(mine.begin(), mine.begin() + count));
    GpuBuffer out(type, count * static_cast<size_t>(n));
    comm.all_gather_async(in.data, count, type, out.data).wait();
    std::vector<float> want;
    for (const auto& v : all) want.insert(want.end(), v.begin(), v.begin() + count);
    problems.push_back(compare("all_gather " + t, out.read(), want));
  }
  {  // reduce_scatter sum: this rank's block of the sum
    GpuBuffer in(type, mine);
    GpuBuffer out(type, count);
    comm.reduce_scatter_async(in.data, count, type, out.data, comm::ReduceOp::kSum).wait();
    const auto first = sum.begin() + static_cast<std::ptrdiff_t>(count) * rank;
    problems.push_back(compare("reduce_scatter " + t, out.read(), std::vector<float>(first, first + count)));
  }
  comm.barrier();
  for (const std::string& p : problems)
    if (!p.empty()) return "rank " + std::to_string(rank) + ": " + p;
  return "";
}

}  // namespace

TEST_CASE("nccl: every collective on device buffers equals the CPU's, float32 and bfloat16, over a TCP store") {
  if (!testing::gpu_or_skip()) return;
  const int n = gpu_count() >= 2 ? 2 : 1;
  rendezvous::StoreServer server("127.0.0.1", 0, server_for(n));
  test::check_all_ok(test::run_on_threads(n, [&](int rank) {
    cuda_ok(cudaSetDevice(rank));
    rendezvous::StoreClient store("127.0.0.1", server.port(), client_for(rank));
    comm::NcclOptions options;
    options.rank = rank;
    options.size = n;
    options.device = rank;
    options.prefix = "comm/test/";
    options.timeout_seconds = 60.0;
    comm::NcclCommunicator comm(store, options);
    if (comm.size() != n || !comm.device_buffers()) return std::string("wrong size or buffer kind");
    for (const auto type : {comm::ElementType::kFloat32, comm::ElementType::kBfloat16})
      if (std::string p = check_collectives(comm, type, n); !p.empty()) return p;
    // The Communicator interface (float32 device pointers, waited for).
    GpuBuffer x(comm::ElementType::kFloat32, std::vector<float>(64, 1.0f + rank));
    comm.all_reduce(static_cast<float*>(x.data), 64, comm::ReduceOp::kSum);
    return compare("Communicator::all_reduce", x.read(), std::vector<float>(64, n == 2 ? 3.0f : 1.0f));
  }));
}

TEST_CASE("nccl: a host buffer is a CommError, not a crash") {
  if (!testing::gpu_or_skip()) return;
  rendezvous::InMemoryStore store;
  comm::NcclOptions options;
  options.device = 0;
  comm::NcclCommunicator comm(store, options);
  std::vector<float> host(16, 1.0f);
  CHECK_THROWS_WITH(comm.all_reduce(host.data(), host.size(), comm::ReduceOp::kSum),
                    Contains("is not memory on cuda:0"));
}

TEST_CASE("nccl: the in-process group (one communicator per GPU, mirrored) all-reduces on every GPU") {
  if (!testing::gpu_or_skip()) return;
  const int n = gpu_count();
  std::vector<int> devices;
  for (int d = 0; d < n; ++d) devices.push_back(d);
  comm::NcclOptions options;
  options.timeout_seconds = 60.0;
  auto group = comm::make_local_nccl_group(devices, options);
  REQUIRE(static_cast<int>(group.size()) == n);
  test::check_all_ok(test::run_on_threads(n, [&](int rank) {
    cuda_ok(cudaSetDevice(rank));
    return check_collectives(*group[static_cast<size_t>(rank)], comm::ElementType::kFloat32, n);
  }));
}

TEST_CASE("nccl: a peer that never joins is PeerLost as soon as the heartbeats say so, else TimeoutError") {
  if (!testing::gpu_or_skip()) return;
  // Rank 0 of two; rank 1 never comes. Init is polled, so the lost-peer check ends it.
  rendezvous::InMemoryStore store;
  comm::NcclOptions options;
  options.rank = 0;
  options.size = 2;
  options.device = 0;
  options.prefix = "comm/lost/";
  options.timeout_seconds = 60.0;
  Stopwatch watch;
  options.peer_lost = [&]() -> std::optional<std::string> {
    if (watch.seconds() < 1.0) return std::nullopt;
    return std::string("task worker:1 (127.0.0.1:2) was lost");
  };
  CHECK_THROWS_WITH(comm::NcclCommunicator(store, options), Contains("worker:1") && Contains("was aborted"));
  CHECK(watch.seconds() < 10.0);

  options.prefix = "comm/late/";
  options.peer_lost = nullptr;
  options.timeout_seconds = 2.0;
  watch.reset();
  CHECK_THROWS_AS(comm::NcclCommunicator(store, options), TimeoutError);
  CHECK(watch.seconds() < 10.0);
}

TEST_CASE("nccl: a peer that never calls the collective: PeerLost within the deadline, then every call fails") {
  if (!testing::two_gpus_or_skip("NCCL puts each rank on its own GPU")) return;
  rendezvous::InMemoryStore store;
  std::vector<std::string> problems = test::run_on_threads(2, [&](int rank) {
    cuda_ok(cudaSetDevice(rank));
    comm::NcclOptions options;
    options.rank = rank;
    options.size = 2;
    options.device = rank;
    options.prefix = "comm/stall/";
    options.timeout_seconds = rank == 0 ? 60.0 : 5.0;
    Stopwatch watch;
    options.peer_lost = [&]() -> std::optional<std::string> {
      if (rank != 0 || watch.seconds() < 1.0) return std::nullopt;
      return std::string("task worker:1 (127.0.0.1:2) was lost");
    };
    comm::NcclCommunicator comm(store, options);
    if (rank == 1) return std::string();  // joins, then never calls the all-reduce
    GpuBuffer x(comm::ElementType::kFloat32, std::vector<float>(1 << 20, 1.0f));
    watch.reset();
    try {
      comm.all_reduce(static_cast<float*>(x.data), 1 << 20, comm::ReduceOp::kSum);
      return std::string("the all-reduce finished without its peer");
    } catch (const PeerLost& e) {
      if (std::string(e.what()).find("worker:1") == std::string::npos) return std::string("PeerLost without the task");
    }
    if (watch.seconds() > 10.0) return std::string("PeerLost came late: ") + std::to_string(watch.seconds()) + " s";
    try {
      comm.barrier();
      return std::string("a call after the abort did not fail");
    } catch (const PeerLost&) {
      return std::string();
    }
  });
  test::check_all_ok(problems);
}

TEST_CASE("nccl: bench allreduce --device gpu prints nccl-tests' table with no wrong element") {
  const bool usable = gpu_count() > 0;
  const integration::RunOutput r = integration::run_dtrain(
      {"bench", "allreduce", "--device", "gpu", "--sizes", "4K:1M", "--iterations", "5"}, {300.0, ""});
  INFO(integration::describe(r));
  if (!usable) {  // the error path runs everywhere; the bench itself needs a GPU
    integration::check_error(r, 2, {"no usable GPU"});
    std::cout << "DTRAIN-SKIPPED: no usable GPU (checked: bench allreduce --device gpu exits 2 saying so)" << std::endl;
    return;
  }
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("#wrong") && Contains("busbw"));
  int rows = 0;
  for (size_t line = 0; line < r.out.size();) {
    const size_t end = r.out.find('\n', line);
    const std::string text = r.out.substr(line, end - line);
    line = end == std::string::npos ? r.out.size() : end + 1;
    if (text.empty() || text[0] == '#') continue;
    ++rows;
    CHECK(text.substr(text.find_last_not_of(' ')) == "0");  // #wrong
  }
  CHECK(rows == 9);  // 4K .. 1M
}
