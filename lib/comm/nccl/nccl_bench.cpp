// bench_nccl_all_reduce (bench_allreduce.h): the all-reduce benchmark with NCCL
// on device buffers, one rank per GPU of this process, one thread per rank (as
// nccl-tests' -t), and the CUDA helpers of nccl_cuda.h.
//
// Per size, as the Gloo benchmark: each rank uploads its integer data, one
// all-reduce is checked element by element, the buffer is zeroed, `warmup`
// untimed all-reduces run; then, after every thread joined (the barrier), each
// rank times `iterations` all-reduces launched back to back and waited for once.
#include <chrono>
#include <exception>
#include <functional>
#include <thread>

#include "comm/bench_allreduce.h"
#include "comm/nccl/nccl_communicator.h"
#include "comm/nccl/nccl_cuda.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::comm {

void check_cuda(cudaError_t status, const char* call, const std::string& where) {
  if (status == cudaSuccess) return;
  throw CudaError(str("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") in ", call,
                      " on ", where));
}

DeviceGuard::DeviceGuard(int device, const std::string& where) : device_(device) {
  check_cuda(cudaGetDevice(&previous_), "cudaGetDevice", where);
  if (previous_ != device_) check_cuda(cudaSetDevice(device_), "cudaSetDevice", where);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ != device_) cudaSetDevice(previous_);
}

namespace {

// Runs body(rank) on one thread per GPU, each bound to its GPU; after all have
// joined, rethrows the first failure.
void on_each_gpu(const std::vector<int>& devices, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(devices.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < devices.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        check_cuda(cudaSetDevice(devices[r]), "cudaSetDevice", str("bench rank ", r));
        body(static_cast<int>(r));
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// One rank's buffer on its GPU.
struct DeviceBuffer {
  float* data = nullptr;
  ~DeviceBuffer() {
    if (data) cudaFree(data);
  }
};

}  // namespace

std::vector<AllReduceResult> bench_nccl_all_reduce(const std::vector<int>& devices,
                                                   const std::vector<size_t>& sizes_bytes, int iterations, int warmup,
                                                   double timeout_seconds) {
  if (iterations < 1) throw ConfigError(str("the benchmark needs at least 1 iteration, got ", iterations));
  if (warmup < 0) throw ConfigError(str("the warmup count cannot be negative, got ", warmup));
  NcclOptions options;
  options.timeout_seconds = timeout_seconds;
  options.name = "the benchmark's NCCL communicator";
  const std::vector<std::unique_ptr<NcclCommunicator>> comms = make_local_nccl_group(devices, options);
  const int n = static_cast<int>(devices.size());
  std::vector<AllReduceResult> results;
  for (const size_t bytes : sizes_bytes) {
    const size_t count = bytes / sizeof(float);
    std::vector<DeviceBuffer> buffers(devices.size());
    std::vector<size_t> wrong(devices.size(), 0);
    std::vector<double> time_us(devices.size(), 0.0);
    on_each_gpu(devices, [&](int r) {
      NcclCommunicator& comm = *comms[static_cast<size_t>(r)];
      const std::string where = str("bench rank ", r);
      float*& x = buffers[static_cast<size_t>(r)].data;
      check_cuda(cudaMalloc(reinterpret_cast<void**>(&x), bytes), "cudaMalloc", where);
      std::vector<float> host(count);
      fill_rank_data(host, r);
      // A synchronous copy: done before the all-reduce is ordered after the default stream.
      check_cuda(cudaMemcpy(x, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy", where);
      comm.all_reduce(x, count, ReduceOp::kSum);
      check_cuda(cudaMemcpy(host.data(), x, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy", where);
      wrong[static_cast<size_t>(r)] = count_wrong_sums(host, n);
      check_cuda(cudaMemset(x, 0, bytes), "cudaMemset", where);
      NcclWork last;
      for (int i = 0; i < warmup; ++i) last = comm.all_reduce_async(x, count, ElementType::kFloat32, ReduceOp::kSum);
      last.wait();
    });
    on_each_gpu(devices, [&](int r) {
      NcclCommunicator& comm = *comms[static_cast<size_t>(r)];
      float* x = buffers[static_cast<size_t>(r)].data;
      const auto start = std::chrono::steady_clock::now();
      NcclWork last;
      for (int i = 0; i < iterations; ++i)
        last = comm.all_reduce_async(x, count, ElementType::kFloat32, ReduceOp::kSum);
      last.wait();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      time_us[static_cast<size_t>(r)] = seconds * 1e6 / iterations;
    });
    AllReduceResult result;
    result.bytes = bytes;
    result.ranks = n;
    result.iterations = iterations;
    for (size_t r = 0; r < devices.size(); ++r) {
      result.time_us += time_us[r] / n;
      result.wrong += wrong[r];
    }
    result.algbw_gbps = result.time_us > 0 ? static_cast<double>(bytes) / (result.time_us * 1e-6) / 1e9 : 0.0;
    result.busbw_gbps = result.algbw_gbps * 2.0 * (n - 1) / n;
    result.correct = result.wrong == 0;
    results.push_back(result);
  }
  return results;
}

}  // namespace dtrain::comm
