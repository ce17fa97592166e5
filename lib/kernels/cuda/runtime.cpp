// Implementation of runtime.h and of the device functions of cuda_ops.h
// (list_gpus, activate, synchronize): the GPU context, the caching allocator and
// the DeviceMemory that Tensor uses for cuda tensors.
#include "kernels/cuda/runtime.h"

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/launchers.h"
#include "tensor/device_memory.h"

namespace dtrain::kernels::cuda {

void throw_cuda_error(const char* call, cudaError_t status, const char* file, int line) {
  if (status == cudaErrorMemoryAllocation)
    throw RuntimeError(str("the GPU is out of memory (", call, " at ", file, ":", line,
                           "): use a smaller train.batch_size_per_replica or model"));
  throw RuntimeError(str("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") in ", call,
                         " at ", file, ":", line));
}

void throw_cublas_error(const char* call, cublasStatus_t status, const char* file, int line) {
  throw RuntimeError(str("cuBLAS error ", cublasLtGetStatusName(status), " (", cublasLtGetStatusString(status),
                         ") in ", call, " at ", file, ":", line));
}

void throw_cudnn_error(const char* call, cudnnStatus_t status, const char* file, int line) {
  throw RuntimeError(str("cuDNN error ", cudnnGetErrorString(status), " in ", call, " at ", file, ":", line));
}

namespace {

Context g_context;
std::mutex g_activate_mutex;

// ---- caching allocator ----

// Blocks are rounded up (512 B for small ones, 2 MiB for large ones) and kept by
// size. A freed block waits for an event recorded on the compute stream at free
// time; it is handed out again only once that event has completed.
class CachingAllocator {
 public:
  static size_t round(size_t bytes) {
    if (bytes <= (1u << 20)) return std::max<size_t>(512, (bytes + 511) / 512 * 512);
    return (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  }

  void* allocate(size_t bytes) {
    const size_t size = round(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    collect_completed(false);
    if (void* p = take_free(size)) return p;
    // Nothing idle of that size yet: wait for every freed block, then try again,
    // before asking CUDA for more memory.
    if (!pending_.empty()) {
      collect_completed(true);
      if (void* p = take_free(size)) return p;
    }
    void* p = nullptr;
    cudaError_t status = cudaMalloc(&p, size);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      release_free_blocks();
      status = cudaMalloc(&p, size);
    }
    if (status != cudaSuccess) throw_cuda_error(str("cudaMalloc(", size, " bytes)").c_str(), status, __FILE__, __LINE__);
    reserved_ += size;
    return p;
  }

  // Never throws (it runs in tensors' destructors): when CUDA is already shut
  // down at process exit, the block is simply dropped.
  void deallocate(void* p, size_t bytes) noexcept {
    if (!p) return;
    const size_t size = round(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    cudaEvent_t event = nullptr;
    if (!events_.empty()) {
      event = events_.back();
      events_.pop_back();
    } else if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (cudaEventRecord(event, g_context.compute) != cudaSuccess) {
      (void)cudaGetLastError();
      events_.push_back(event);
      return;
    }
    pending_.push_back({p, size, event});
  }

  size_t reserved() const { return reserved_; }

 private:
  struct Pending {
    void* p;
    size_t size;
    cudaEvent_t event;
  };

  void* take_free(size_t size) {
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }

  void collect_completed(bool wait) {
    std::vector<Pending> still;
    for (const Pending& b : pending_) {
      const cudaError_t status = wait ? cudaEventSynchronize(b.event) : cudaEventQuery(b.event);
      if (status == cudaSuccess) {
        free_[b.size].push_back(b.p);
        events_.push_back(b.event);
      } else {
        if (status != cudaErrorNotReady) (void)cudaGetLastError();
        still.push_back(b);
      }
    }
    pending_.swap(still);
  }

  void release_free_blocks() {
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) {
        cudaFree(p);
        reserved_ -= size;
      }
    free_.clear();
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> events_;
  size_t reserved_ = 0;
};

CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();  // never destroyed: tensors may outlive main()
  return *a;
}

// ---- uploads through pinned memory ----

// A ring of pinned host buffers for Tensor::to(gpu): the host data is copied into
// one, then to the device on the copy stream; the buffer is reused once its copy
// has completed.
class Uploader {
 public:
  void upload(void* dst, const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    Slot& s = slots_[next_];
    next_ = (next_ + 1) % kSlots;
    if (!s.copied) DT_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    // Why: the slot's pinned buffer may still be the source of its previous copy.
    DT_CUDA_CHECK(cudaEventSynchronize(s.copied));
    if (s.capacity < bytes) {
      if (s.pinned) DT_CUDA_CHECK(cudaFreeHost(s.pinned));
      s.pinned = nullptr;
      DT_CUDA_CHECK(cudaHostAlloc(&s.pinned, bytes, cudaHostAllocDefault));
      s.capacity = bytes;
    }
    std::memcpy(s.pinned, src, bytes);
    DT_CUDA_CHECK(cudaMemcpyAsync(dst, s.pinned, bytes, cudaMemcpyHostToDevice, g_context.copy));
    DT_CUDA_CHECK(cudaEventRecord(s.copied, g_context.copy));
    // Why: ops issued from now on read dst; they must wait for the copy, while
    // the ops already issued (this step's) run on undisturbed.
    DT_CUDA_CHECK(cudaStreamWaitEvent(g_context.compute, s.copied, 0));
  }

 private:
  static constexpr int kSlots = 8;
  struct Slot {
    void* pinned = nullptr;
    size_t capacity = 0;
    cudaEvent_t copied = nullptr;
  };
  std::mutex mutex_;
  Slot slots_[kSlots];
  int next_ = 0;
};

Uploader& uploader() {
  static Uploader* u = new Uploader();
  return *u;
}

class CudaMemory : public DeviceMemory {
 public:
  void* allocate(const Device& device, size_t bytes, bool zero) override {
    check_device(device);
    void* p = allocator().allocate(bytes);
    if (zero) DT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_context.compute));
    return p;
  }

  void deallocate(const Device& device, void* p, size_t bytes) override { allocator().deallocate(p, bytes); }

  void copy(void* dst, const Device& dst_device, const void* src, const Device& src_device,
            size_t bytes) override {
    if (dst_device.is_cpu()) {
      // To the host: ordered after every op issued so far; returns when the bytes
      // are there (cudaMemcpyAsync to pageable memory completes before returning,
      // and the stream sync makes that explicit).
      DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g_context.compute));
      DT_CUDA_CHECK(cudaStreamSynchronize(g_context.compute));
      return;
    }
    check_device(dst_device);
    const cudaMemcpyKind kind = src_device.is_cpu() ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice;
    // Into an existing tensor: on the compute stream, after the ops that may
    // still read dst. Pageable host sources are staged by the driver before this returns.
    DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, g_context.compute));
  }

  void upload_new(const Device& device, void* dst, const void* src, size_t bytes) override {
    check_device(device);
    uploader().upload(dst, src, bytes);
  }

  void fill(const Device& device, float* p, int64_t count, float value) override {
    check_device(device);
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

Context& context() {
  if (g_context.device < 0) throw InternalError("a CUDA op ran before a GPU was selected");
  return g_context;
}

void* device_alloc(size_t bytes) { return allocator().allocate(bytes); }
void device_free(void* p, size_t bytes) { allocator().deallocate(p, bytes); }

Scratch::Scratch(size_t bytes) : p_(device_alloc(bytes)), bytes_(bytes) {}
Scratch::~Scratch() { device_free(p_, bytes_); }

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
  static CudaMemory memory;
  register_device_memory(DeviceType::kCuda, &memory);
}

void synchronize() {
  if (g_context.device < 0) return;
  DT_CUDA_CHECK(cudaStreamSynchronize(g_context.compute));
}

void set_allow_tf32(bool allow) { g_context.allow_tf32 = allow; }

}  // namespace dtrain::kernels::cuda
