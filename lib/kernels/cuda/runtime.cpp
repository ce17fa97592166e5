// Implementation of runtime.h and of the device functions of cuda_ops.h
// (list_gpus, activate, synchronize): the GPU context, the caching allocator and
// the DeviceMemory that Tensor uses for cuda tensors.
#include "kernels/cuda/runtime.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
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

// Makes the active GPU current on the calling thread (each thread starts on
// device 0; a communication thread copying gradients must not touch GPU 0's
// context when the job uses another GPU).
cudaError_t try_bind_thread() noexcept {
  thread_local int bound = -1;
  if (bound == g_context.device || g_context.device < 0) return cudaSuccess;
  const cudaError_t status = cudaSetDevice(g_context.device);
  if (status == cudaSuccess) bound = g_context.device;
  return status;
}
void bind_thread() { DT_CUDA_CHECK(try_bind_thread()); }

// ---- caching allocator ----

// Blocks are rounded up (512 B for small ones, 2 MiB for large ones) and kept by
// size. Freeing records an event on the compute stream; the block may be handed
// out again at once, because every op runs on the compute stream in issue order
// (a new user's ops come after the old user's). The one other writer, an upload
// on the copy stream, first waits for that event (guard()).
class CachingAllocator {
 public:
  static size_t round(size_t bytes) {
    if (bytes <= (1u << 20)) return std::max<size_t>(512, (bytes + 511) / 512 * 512);
    return (bytes + (2u << 20) - 1) / (2u << 20) * (2u << 20);
  }

  void* allocate(size_t bytes) {
    bind_thread();
    const size_t size = round(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<Free>& list = free_[size];
    if (!list.empty()) {
      // A block the GPU is done with if there is one (an upload into it need not
      // wait), else the newest: compute-stream users never wait either way.
      size_t pick = list.size() - 1;
      for (size_t i = list.size(); i-- > 0;)
        if (done(list[i].event)) {
          pick = i;
          break;
        }
      const Free f = list[pick];
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(pick));
      if (done(f.event))
        events_.push_back(f.event);
      else
        guards_[f.p] = f.event;
      return f.p;
    }
    void* p = nullptr;
    cudaError_t status = cudaMalloc(&p, size);
    if (status == cudaErrorMemoryAllocation) {
      // Give the cached blocks back to CUDA (once the GPU is done with them) and retry.
      (void)cudaGetLastError();
      cudaDeviceSynchronize();
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
    if (try_bind_thread() != cudaSuccess) {  // CUDA is shut down: drop the block
      (void)cudaGetLastError();
      return;
    }
    const size_t size = round(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    auto guard = guards_.find(p);
    if (guard != guards_.end()) {
      events_.push_back(guard->second);
      guards_.erase(guard);
    }
    cudaEvent_t event = nullptr;
    if (!events_.empty()) {
      event = events_.back();
      events_.pop_back();
    } else if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (cudaEventRecord(event, g_context.compute) != cudaSuccess) {
      // Never reuse an event that could not be recorded: it would fail again.
      (void)cudaGetLastError();
      cudaEventDestroy(event);
      (void)cudaGetLastError();
      return;
    }
    free_[size].push_back({p, event});
  }

  // Makes `stream` wait until the previous user of block p (handed out by
  // allocate) is done with it, when that was not known to be the case yet.
  void guard(void* p, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = guards_.find(p);
    if (it == guards_.end()) return;
    DT_CUDA_CHECK(cudaStreamWaitEvent(stream, it->second, 0));
    events_.push_back(it->second);
    guards_.erase(it);
  }

  size_t reserved() const { return reserved_; }

 private:
  struct Free {
    void* p;
    cudaEvent_t event;  // recorded on the compute stream when the block was freed
  };

  // Whether the GPU has finished with a freed block (its free event completed).
  static bool done(cudaEvent_t event) {
    if (!event) return true;
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaSuccess) return true;
    (void)cudaGetLastError();  // cudaErrorNotReady is not an error; others show at the next checked call
    return false;
  }

  void release_free_blocks() {
    for (auto& [size, blocks] : free_)
      for (const Free& f : blocks) {
        cudaFree(f.p);
        if (f.event) events_.push_back(f.event);
        reserved_ -= size;
      }
    free_.clear();
  }

  std::mutex mutex_;
  std::map<size_t, std::vector<Free>> free_;
  std::unordered_map<void*, cudaEvent_t> guards_;  // blocks handed out before their free event completed
  std::vector<cudaEvent_t> events_;                 // idle events for reuse
  size_t reserved_ = 0;
};

CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator();  // never destroyed: tensors may outlive main()
  return *a;
}

// ---- host-to-device copies through pinned memory ----

// A ring of pinned host buffers of kChunk bytes each: host data is copied into
// them chunk by chunk, then to the device asynchronously, so the caller's memory
// is free at once and the host never waits for the copy. A buffer is reused once
// its copy has completed. Pinned memory stays at kSlots * kChunk (64 MiB).
class Uploader {
 public:
  // Into a new tensor: on the copy stream; the compute stream waits for it.
  void upload_new(void* dst, const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Why: dst may have been freed by ops still queued on the compute stream.
    allocator().guard(dst, g_context.copy);
    const cudaEvent_t last = copy_chunks(dst, src, bytes, g_context.copy);
    if (!last) return;  // nothing to copy
    // Why: ops issued from now on read dst and must wait for the copy (the copy
    // stream runs its chunks in order, so the last one's event covers all),
    // while the ops already issued (this step's) run on undisturbed.
    DT_CUDA_CHECK(cudaStreamWaitEvent(g_context.compute, last, 0));
  }

  // Into an existing tensor: on the compute stream, after the ops issued so far
  // (which may still read dst).
  void upload_ordered(void* dst, const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    copy_chunks(dst, src, bytes, g_context.compute);
  }

 private:
  static constexpr int kSlots = 8;
  static constexpr size_t kChunk = size_t{8} << 20;
  struct Slot {
    void* pinned = nullptr;
    cudaEvent_t copied = nullptr;
  };

  // Copies [src, src + bytes) to dst on `stream` through the ring; returns the
  // event recorded after the last chunk.
  cudaEvent_t copy_chunks(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    cudaEvent_t last = nullptr;
    for (size_t offset = 0; offset < bytes; offset += kChunk) {
      const size_t n = std::min(kChunk, bytes - offset);
      Slot& s = ready_slot();
      std::memcpy(s.pinned, static_cast<const char*>(src) + offset, n);
      DT_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + offset, s.pinned, n, cudaMemcpyHostToDevice, stream));
      DT_CUDA_CHECK(cudaEventRecord(s.copied, stream));
      last = s.copied;
      next_ = (next_ + 1) % kSlots;
    }
    return last;
  }

  // The current slot, its buffer allocated and free to overwrite.
  Slot& ready_slot() {
    Slot& s = slots_[next_];
    if (!s.copied) DT_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    // Why: the slot's pinned buffer may still be the source of its previous copy.
    DT_CUDA_CHECK(cudaEventSynchronize(s.copied));
    if (!s.pinned) {
      const cudaError_t status = cudaHostAlloc(&s.pinned, kChunk, cudaHostAllocDefault);
      if (status != cudaSuccess) {
        (void)cudaGetLastError();
        s.pinned = nullptr;
        throw RuntimeError(str("cannot pin ", kChunk >> 20, " MiB of host memory for copies to the GPU: ",
                               cudaGetErrorString(status), " (is the locked-memory limit, ulimit -l, too low?)"));
      }
    }
    return s;
  }

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
    bind_thread();
    void* p = allocator().allocate(bytes);
    if (zero) DT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, g_context.compute));
    return p;
  }

  void deallocate(const Device& device, void* p, size_t bytes) override { allocator().deallocate(p, bytes); }

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
      uploader().upload_ordered(dst, src, bytes);
      return;
    }
    DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g_context.compute));
  }

  void upload_new(const Device& device, void* dst, const void* src, size_t bytes) override {
    check_device(device);
    bind_thread();
    uploader().upload_new(dst, src, bytes);
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

Context& context() {
  if (g_context.device < 0) throw InternalError("a CUDA op ran before a GPU was selected");
  bind_thread();
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
  static CudaMemory* memory = new CudaMemory();  // never destroyed: tensors may outlive main()
  register_device_memory(DeviceType::kCuda, memory);
}

void synchronize() {
  if (g_context.device < 0) return;
  DT_CUDA_CHECK(cudaStreamSynchronize(g_context.compute));
}

void set_allow_tf32(bool allow) { g_context.allow_tf32 = allow; }

std::string library_versions() {
  // The runtime and cuDNN as compiled against, cuBLASLt as loaded; none needs a driver or GPU.
  const size_t lt = cublasLtGetVersion();  // major * 10000 + minor * 100 + patch
  return str("CUDA runtime ", CUDART_VERSION / 1000, ".", (CUDART_VERSION % 1000) / 10, ", cuBLASLt ", lt / 10000, ".",
             (lt / 100) % 100, ".", lt % 100, ", cuDNN ", CUDNN_MAJOR, ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL);
}

}  // namespace dtrain::kernels::cuda
