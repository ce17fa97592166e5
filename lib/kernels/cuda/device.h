// The per-process GPU context of the CUDA backend, internal to lib/kernels/cuda:
// the GPU this process uses, its two streams and its cuBLASLt and cuDNN handles,
// set up once by activate() (cuda_ops.h), and the binding of each calling thread
// to that GPU. Ops reach it through context().
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace dtrain::kernels::cuda {

struct Context {
  int device = -1;
  cudaStream_t compute = nullptr;  // every op, in issue order
  cudaStream_t copy = nullptr;     // uploads of new tensors from pinned memory
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t cudnn = nullptr;
  bool allow_tf32 = true;          // cuDNN convolutions (PyTorch's default); matmuls stay FP32
};

// The active GPU's context, with the calling thread bound to its GPU; throws
// InternalError when no GPU was activated.
Context& context();

// The context as it is (device -1 before activate()), without checks or thread
// binding: for the allocator and the uploader, whose callers bound the thread
// already or must not throw.
Context& raw_context() noexcept;

// Makes the active GPU current on the calling thread (each thread starts on
// device 0; a communication thread copying gradients must not touch GPU 0's
// context when the job uses another GPU). try_bind_thread() returns the status
// instead of throwing; both do nothing before activate().
cudaError_t try_bind_thread() noexcept;
void bind_thread();

}  // namespace dtrain::kernels::cuda
