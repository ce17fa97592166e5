// Implementation of allocator.h: the caching allocators (one per GPU, used for
// the calling thread's current GPU) behind device_alloc, device_free and Scratch. Blocks are rounded up and kept by size; a freed block
// carries an event recorded on the compute stream and may be handed out again at
// once, because every op runs on that stream in issue order. When cudaMalloc runs
// out of memory, the cached blocks go back to CUDA and the allocation is retried.
#include "kernels/cuda/allocator.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "core/strings.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/errors.h"

namespace dtrain::kernels::cuda {
namespace {

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
    if (cudaEventRecord(event, raw_context().compute) != cudaSuccess) {
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

  // Bytes taken from CUDA and held (in use or cached).
  size_t reserved() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reserved_;
  }

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

// GPU `device`'s allocator (its blocks and events are that GPU's).
CachingAllocator& allocator_of(int device) {
  static std::mutex mutex;
  static CachingAllocator* allocators[kMaxGpus] = {};  // never destroyed: tensors may outlive main()
  std::lock_guard<std::mutex> lock(mutex);
  if (!allocators[device]) allocators[device] = new CachingAllocator();
  return *allocators[device];
}

// The calling thread's current GPU's allocator.
CachingAllocator& allocator() { return allocator_of(std::max(0, current_device())); }

}  // namespace

size_t reserved_bytes(int index) {
  DT_CHECK(index >= 0 && index < kMaxGpus, "reserved_bytes: GPU index ", index);
  return allocator_of(index).reserved();
}

void* device_alloc(size_t bytes) { return allocator().allocate(bytes); }
void device_free(void* p, size_t bytes) { allocator().deallocate(p, bytes); }
void wait_for_block(void* p, cudaStream_t stream) { allocator().guard(p, stream); }

Scratch::Scratch(size_t bytes) : p_(device_alloc(bytes)), bytes_(bytes) {}
Scratch::~Scratch() { device_free(p_, bytes_); }

}  // namespace dtrain::kernels::cuda
