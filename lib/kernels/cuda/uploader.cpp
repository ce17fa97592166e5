// Implementation of uploader.h: per GPU (the calling thread's current one), a
// ring of pinned host buffers through which host data is copied to the GPU
// chunk by chunk. Uploads into new tensors run on
// the copy stream and the compute stream waits for them with an event, so the
// next step's batch is copied while this step computes; uploads into existing
// tensors run on the compute stream in issue order.
#include "kernels/cuda/uploader.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "core/strings.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/errors.h"

namespace dtrain::kernels::cuda {
namespace {

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
    wait_for_block(dst, raw_context().copy);
    const cudaEvent_t last = copy_chunks(dst, src, bytes, raw_context().copy);
    if (!last) return;  // nothing to copy
    // Why: ops issued from now on read dst and must wait for the copy (the copy
    // stream runs its chunks in order, so the last one's event covers all),
    // while the ops already issued (this step's) run on undisturbed.
    DT_CUDA_CHECK(cudaStreamWaitEvent(raw_context().compute, last, 0));
  }

  // Into an existing tensor: on the compute stream, after the ops issued so far
  // (which may still read dst).
  void upload_ordered(void* dst, const void* src, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    copy_chunks(dst, src, bytes, raw_context().compute);
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
        throw CudaError(str("cannot pin ", kChunk >> 20, " MiB of host memory for copies to the GPU: ",
                               cudaGetErrorString(status), " (is the locked-memory limit, ulimit -l, too low?)"));
      }
    }
    return s;
  }

  std::mutex mutex_;
  Slot slots_[kSlots];
  int next_ = 0;
};

// The calling thread's current GPU's uploader (events are recorded on its streams).
Uploader& uploader() {
  static std::mutex mutex;
  static Uploader* uploaders[kMaxGpus] = {};  // never destroyed, as the allocators
  const int device = std::max(0, current_device());
  std::lock_guard<std::mutex> lock(mutex);
  if (!uploaders[device]) uploaders[device] = new Uploader();
  return *uploaders[device];
}

}  // namespace

void upload_new(void* dst, const void* src, size_t bytes) { uploader().upload_new(dst, src, bytes); }
void upload_ordered(void* dst, const void* src, size_t bytes) { uploader().upload_ordered(dst, src, bytes); }

}  // namespace dtrain::kernels::cuda
