// The CUDA backend's device functions (cuda_ops.h: list_gpus, activate,
// synchronize, set_allow_tf32, library_versions) and the per-process context of
// device.h: activating a GPU creates its streams and library handles and
// registers the DeviceMemory that Tensor uses for cuda tensors (memory from the
// caching allocator, host copies through the uploader). One GPU per process.
#include "kernels/cuda/device.h"

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

Context g_context;
std::mutex g_activate_mutex;

class CudaMemory : public DeviceMemory {
 public:
  void* allocate(const Device& device, size_t bytes, bool zero) override {
    check_device(device);
    bind_thread();
    void* p = device_alloc(bytes);
    if (zero) DT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_context.compute));
    return p;
  }

  void deallocate(const Device& device, void* p, size_t bytes) override { device_free(p, bytes); }

  void copy(void* dst, const Device& dst_device, const void* src, const Device& src_device,
            size_t bytes) override {
    bind_thread();
    if (dst_device.is_cpu()) {
      // To the host: ordered after every op issued so far; returns when the bytes
      // are there (cudaMemcpyAsync to pageable memory completes before returning,
      // and the stream sync makes that explicit).
      DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_context.compute));
      DT_CUDA_CHECK(cudaStreamSynchronize(g_context.compute));
      return;
    }
    check_device(dst_device);
    if (src_device.is_cpu()) {
      cuda::upload_ordered(dst, src, bytes);
      return;
    }
    DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_context.compute));
  }

  void upload_new(const Device& device, void* dst, const void* src, size_t bytes) override {
    check_device(device);
    bind_thread();
    cuda::upload_new(dst, src, bytes);
  }

  void fill(const Device& device, float* p, int64_t count, float value) override {
    check_device(device);
    bind_thread();
    if (value == 0.0f) {
      DT_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(count) * sizeof(float), g_context.compute));
      return;
    }
    launch(FillBody{p, value}, count);
  }

 private:
  static void check_device(const Device& device) {
    if (device.index != g_context.device)
      throw ConfigError(str("a tensor on ", device.str(), " but this process uses cuda:", g_context.device,
                            ": one GPU per process"));
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

cudaError_t try_bind_thread() noexcept {
  thread_local int bound = -1;
  if (bound == g_context.device || g_context.device < 0) return cudaSuccess;
  const cudaError_t status = cudaSetDevice(g_context.device);
  if (status == cudaSuccess) bound = g_context.device;
  return status;
}
void bind_thread() { DT_CUDA_CHECK(try_bind_thread()); }

Context& raw_context() noexcept { return g_context; }

Context& context() {
  if (g_context.device < 0) throw InternalError("a CUDA op ran before a GPU was selected");
  bind_thread();
  return g_context;
}

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
    if (free_memory && g_context.device >= 0) cudaSetDevice(g_context.device);
    report.gpus.push_back(info);
  }
  if (report.gpus.empty()) report.why_none = "no CUDA device could be queried";
  return report;
}

void activate(int index) {
  std::lock_guard<std::mutex> lock(g_activate_mutex);
  if (g_context.device == index) return;
  if (g_context.device >= 0)
    throw ConfigError(str("this process already uses cuda:", g_context.device, "; one GPU per process"));
  DT_CUDA_CHECK(cudaSetDevice(index));
  DT_CUDA_CHECK(cudaStreamCreateWithFlags(&g_context.compute, cudaStreamNonBlocking));
  DT_CUDA_CHECK(cudaStreamCreateWithFlags(&g_context.copy, cudaStreamNonBlocking));
  DT_CUBLAS_CHECK(cublasLtCreate(&g_context.lt));
  DT_CUDNN_CHECK(cudnnCreate(&g_context.cudnn));
  DT_CUDNN_CHECK(cudnnSetStream(g_context.cudnn, g_context.compute));
  g_context.device = index;
  static CudaMemory* memory = new CudaMemory();  // never destroyed: tensors may outlive main()
  register_device_memory(DeviceType::kCuda, memory);
}

void synchronize() {
  if (g_context.device < 0) return;
  DT_CUDA_CHECK(cudaStreamSynchronize(g_context.compute));
}

void* compute_stream() { return context().compute; }

void set_allow_tf32(bool allow) { g_context.allow_tf32 = allow; }

std::string library_versions() {
  // The runtime and cuDNN as compiled against, cuBLASLt as loaded; none needs a driver or GPU.
  const size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  return str("CUDA runtime ", CUDART_VERSION / 1000, ".", (CUDART_VERSION % 1000) / 10, ", cuBLASLt ", lt / 10000, ".",
             (lt / 100) % 100, ".", lt % 100, ", cuDNN ", CUDNN_MAJOR, ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL);
}

}  // namespace dtrain::kernels::cuda
