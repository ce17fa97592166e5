// The CUDA backend's runtime, internal to lib/kernels/cuda: error checks, the
// per-process GPU context (device, streams, cuBLASLt and cuDNN handles), the
// caching allocator behind DeviceMemory, and scratch buffers.
//
// Streams: every op runs on context().compute, in issue order, so ops never need
// to wait for each other explicitly. Uploads of new tensors (Tensor::to) run on
// context().copy from pinned staging buffers, and the compute stream waits for
// them with an event: a batch for the next step is copied while this step computes.
//
// Memory: freed blocks go back to the caching allocator with an event recorded
// on the compute stream. They are handed out again at once (the compute
// stream's order protects them); an upload on the copy stream into such a block
// first waits for that event. After warm-up (the first step's shapes), training
// allocates nothing from CUDA and the host never waits for the GPU mid-step.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>

namespace dtrain::kernels::cuda {

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t status, const char* file, int line);
[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t status, const char* file, int line);
[[noreturn]] void throw_cudnn_error(const char* call, cudnnStatus_t status, const char* file, int line);

#define DT_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    const cudaError_t dt_status_ = (call);                                                    \
    if (dt_status_ != cudaSuccess)                                                            \
      ::dtrain::kernels::cuda::throw_cuda_error(#call, dt_status_, __FILE__, __LINE__);      \
  } while (0)
#define DT_CUBLAS_CHECK(call)                                                                 \
  do {                                                                                        \
    const cublasStatus_t dt_status_ = (call);                                                 \
    if (dt_status_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::dtrain::kernels::cuda::throw_cublas_error(#call, dt_status_, __FILE__, __LINE__);    \
  } while (0)
#define DT_CUDNN_CHECK(call)                                                                  \
  do {                                                                                        \
    const cudnnStatus_t dt_status_ = (call);                                                  \
    if (dt_status_ != CUDNN_STATUS_SUCCESS)                                                   \
      ::dtrain::kernels::cuda::throw_cudnn_error(#call, dt_status_, __FILE__, __LINE__);     \
  } while (0)

struct Context {
  int device = -1;
  cudaStream_t compute = nullptr;  // every op, in issue order
  cudaStream_t copy = nullptr;     // uploads of new tensors from pinned memory
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t cudnn = nullptr;
  bool allow_tf32 = true;          // cuDNN convolutions (PyTorch's default); matmuls stay FP32
};

// The active GPU's context; throws InternalError when no GPU was activated.
Context& context();

// Device memory from the caching allocator (not zero-filled).
void* device_alloc(size_t bytes);
void device_free(void* p, size_t bytes);

// A device buffer for the duration of one op (workspaces, partial sums).
class Scratch {
 public:
  explicit Scratch(size_t bytes);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return p_; }
  float* floats() const { return static_cast<float*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace dtrain::kernels::cuda
