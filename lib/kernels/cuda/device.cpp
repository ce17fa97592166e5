// The CUDA backend's device functions (cuda_ops.h: list_gpus, activate,
// synchronize, set_allow_tf32, library_versions) and the per-GPU contexts of
// device.h: activating a GPU creates its streams and library handles and
// registers the DeviceMemory that Tensor uses for cuda tensors (memory from the
// caching allocator, host copies through the uploader). A process may activate
// several GPUs (mirrored: one replica per GPU); every call that takes a Device
// works on that device's context.
#include "kernels/cuda/device.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "core/error.h"
#include "core/strings.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/errors.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/uploader.h"
#include "tensor/device_memory.h"

namespace dtrain::kernels::cuda {
namespace {

Context g_contexts[kMaxGpus];
std::atomic<int> g_first{-1};  // the first GPU activated: every thread's GPU until it chooses one
std::atomic<bool> g_allow_tf32{true};
std::mutex g_activate_mutex;
thread_local int t_device = -1;  // the thread's chosen GPU (-1: g_first)

bool activated(int index) { return index >= 0 && index < kMaxGpus && g_contexts[index].device == index; }

// Copies between two GPUs: after the work issued so far on both, on the
// destination's compute stream, waited for (rare: placing and averaging state).
void copy_between_gpus(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  cudaEvent_t ready = nullptr;
  {
    const DeviceScope scope(src_device);
    DT_CUDA_CHECK(scope.status());
    DT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    DT_CUDA_CHECK(cudaEventRecord(ready, g_contexts[src_device].compute));
  }
  const DeviceScope scope(dst_device);
  DT_CUDA_CHECK(scope.status());
  cudaStream_t stream = g_contexts[dst_device].compute;
  const cudaError_t waited = cudaStreamWaitEvent(stream, ready, 0);
  cudaEventDestroy(ready);  // released once the wait has been enqueued
  DT_CUDA_CHECK(waited);
  DT_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream));
  // Why: the source may be freed, and reused on its own stream, right after.
  DT_CUDA_CHECK(cudaStreamSynchronize(stream));
}

class CudaMemory : public DeviceMemory {
 public:
  void* allocate(const Device& device, size_t bytes, bool zero) override {
    const DeviceScope scope(checked(device));
    DT_CUDA_CHECK(scope.status());
    void* p = device_alloc(bytes);
    if (zero) DT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_contexts[device.index].compute));
    return p;
  }

  void deallocate(const Device& device, void* p, size_t bytes) override {
    if (!activated(device.index)) return;
    const DeviceScope scope(device.index);
    device_free(p, bytes);  // binds itself (or drops the block when CUDA is shut down)
  }

  void copy(void* dst, const Device& dst_device, const void* src, const Device& src_device,
            size_t bytes) override {
    if (dst_device.is_cpu()) {
      // To the host: ordered after every op issued so far on the source's GPU;
      // returns when the bytes are there (cudaMemcpyAsync to pageable memory
      // completes before returning, and the stream sync makes that explicit).
      const DeviceScope scope(checked(src_device));
    DT_CUDA_CHECK(scope.status());
      cudaStream_t stream = g_contexts[src_device.index].compute;
      DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
      DT_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
    }
    if (src_device.is_cpu()) {
      const DeviceScope scope(checked(dst_device));
    DT_CUDA_CHECK(scope.status());
      cuda::upload_ordered(dst, src, bytes);
      return;
    }
    if (src_device.index != dst_device.index) {
      copy_between_gpus(dst, checked(dst_device), src, checked(src_device), bytes);
      return;
    }
    const DeviceScope scope(checked(dst_device));
    DT_CUDA_CHECK(scope.status());
    DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_contexts[dst_device.index].compute));
  }

  void upload_new(const Device& device, void* dst, const void* src, size_t bytes) override {
    const DeviceScope scope(checked(device));
    DT_CUDA_CHECK(scope.status());
    cuda::upload_new(dst, src, bytes);
  }

  void fill(const Device& device, float* p, int64_t count, float value) override {
    const DeviceScope scope(checked(device));
    DT_CUDA_CHECK(scope.status());
    if (value == 0.0f) {
      DT_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(count) * sizeof(float),
                                    g_contexts[device.index].compute));
      return;
    }
    launch(FillBody{p, value}, count);
  }

 private:
  // device.index, checked: a GPU this process has not set up is a ConfigError.
  static int checked(const Device& device) {
    if (!activated(device.index))
      throw ConfigError(str("a tensor on ", device.str(), ", a GPU this process has not set up (its device or "
                            "strategy names other GPUs)"));
    return device.index;
  }
};

std::string why_no_gpu(cudaError_t status) {
  switch (status) {
    case cudaErrorNoDevice: return "no CUDA device is present (cudaErrorNoDevice)";
    case cudaErrorInsufficientDriver:
      return "no usable NVIDIA driver: the driver is missing or older than this CUDA runtime "
             "(cudaErrorInsufficientDriver)";
    default: return str("CUDA cannot be initialised: ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
  }
}

}  // namespace

int current_device() noexcept { return t_device >= 0 ? t_device : g_first.load(); }

void use_device(int index) {
  if (!activated(index)) throw InternalError(str("cuda:", index, " was chosen for a thread before it was set up"));
  t_device = index;
  bind_thread();
}

cudaError_t try_bind_thread() noexcept {
  const int device = current_device();
  if (device < 0) return cudaSuccess;
  // The runtime's own record, not a cache of ours: NCCL, cuDNN or a destructor
  // may have called cudaSetDevice on this thread since (cudaGetDevice reads the
  // runtime's thread state; it makes no driver call).
  int bound = -1;
  if (cudaGetDevice(&bound) == cudaSuccess && bound == device) return cudaSuccess;
  (void)cudaGetLastError();
  return cudaSetDevice(device);
}
void bind_thread() { DT_CUDA_CHECK(try_bind_thread()); }

Context& raw_context(int index) noexcept { return g_contexts[index >= 0 && index < kMaxGpus ? index : 0]; }
Context& raw_context() noexcept { return raw_context(current_device()); }

Context& context() {
  const int device = current_device();
  if (device < 0) throw InternalError("a CUDA op ran before a GPU was selected");
  bind_thread();
  return g_contexts[device];
}

DeviceScope::DeviceScope(int index) noexcept : previous_(t_device) {
  t_device = index;
  status_ = try_bind_thread();
}
DeviceScope::~DeviceScope() {
  t_device = previous_;
  (void)try_bind_thread();
}

bool allow_tf32() noexcept { return g_allow_tf32.load(); }

GpuReport list_gpus(bool free_memory) {
  GpuReport report;
  report.built_with_cuda = true;
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    report.why_none = why_no_gpu(status);
    return report;
  }
  if (count == 0) {
    report.why_none = "the NVIDIA driver reports no CUDA device";
    return report;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    GpuInfo info;
    info.index = i;
    info.name = prop.name;
    info.compute_major = prop.major;
    info.compute_minor = prop.minor;
    info.multiprocessors = prop.multiProcessorCount;
    info.total_bytes = prop.totalGlobalMem;
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", static_cast<unsigned>(prop.pciDomainID),
                  static_cast<unsigned>(prop.pciBusID), static_cast<unsigned>(prop.pciDeviceID));
    info.pci_bus_id = bus;
    // Free memory needs a context on the device (hundreds of MiB each): only
    // when asked (dtrain devices), never while choosing a device to train on.
    size_t free_bytes = 0, total = 0;
    if (free_memory && cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
      info.free_bytes = free_bytes;
    (void)cudaGetLastError();
    if (free_memory) (void)try_bind_thread();  // the thread goes back to its own GPU
    report.gpus.push_back(info);
  }
  if (report.gpus.empty()) report.why_none = "no CUDA device could be queried";
  return report;
}

void activate(int index) {
  std::lock_guard<std::mutex> lock(g_activate_mutex);
  if (index < 0 || index >= kMaxGpus) throw ConfigError(str("cuda:", index, ": dtrain uses GPUs 0 to ", kMaxGpus - 1));
  if (activated(index)) return;
  Context& c = g_contexts[index];
  DT_CUDA_CHECK(cudaSetDevice(index));
  DT_CUDA_CHECK(cudaStreamCreateWithFlags(&c.compute, cudaStreamNonBlocking));
  DT_CUDA_CHECK(cudaStreamCreateWithFlags(&c.copy, cudaStreamNonBlocking));
  DT_CUBLAS_CHECK(cublasLtCreate(&c.lt));
  DT_CUDNN_CHECK(cudnnCreate(&c.cudnn));
  DT_CUDNN_CHECK(cudnnSetStream(c.cudnn, c.compute));
  c.device = index;  // last: the context is complete once it says so
  if (g_first.load() < 0) {
    g_first = index;
    static CudaMemory* memory = new CudaMemory();  // never destroyed: tensors may outlive main()
    register_device_memory(DeviceType::kCuda, memory);
  }
  (void)try_bind_thread();  // back to the thread's current GPU
}

void synchronize(int index) {
  if (!activated(index)) return;
  const DeviceScope scope(index);
  DT_CUDA_CHECK(scope.status());
  DT_CUDA_CHECK(cudaStreamSynchronize(g_contexts[index].compute));
}

void* compute_stream(int index) {
  if (!activated(index)) throw InternalError(str("the compute stream of cuda:", index, ", a GPU not set up"));
  return g_contexts[index].compute;
}

void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }

std::string library_versions() {
  // The runtime as compiled against (linked statically), cuBLASLt and cuDNN as
  // loaded (a machine's wheels may bring other versions than the headers had);
  // none needs a driver or GPU.
  const size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  const size_t dnn = cudnnGetVersion();    // the same encoding from cuDNN 9 on
  std::string text = str("CUDA runtime ", CUDART_VERSION / 1000, ".", (CUDART_VERSION % 1000) / 10, ", cuBLASLt ",
                         lt / 10000, ".", (lt / 100) % 100, ".", lt % 100, ", cuDNN ", dnn / 10000, ".",
                         (dnn / 100) % 100, ".", dnn % 100);
  if (dnn != static_cast<size_t>(CUDNN_VERSION))
    text += str(" (built against ", CUDNN_MAJOR, ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL, ")");
  return text;
}

}  // namespace dtrain::kernels::cuda
