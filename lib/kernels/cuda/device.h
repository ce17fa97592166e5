// The per-GPU contexts of the CUDA backend, internal to lib/kernels/cuda: for
// each GPU this process uses, its two streams and its cuBLASLt and cuDNN
// handles, set up by activate() (cuda_ops.h); and each thread's current GPU.
//
// A process may use several GPUs (mirrored: one replica per GPU, a thread each).
// Every thread has a current GPU: the one it last chose (use_device(), which
// ops.cpp calls with the device of each op's tensors), else the first GPU
// activated. Ops reach the current GPU's context through context(); memory and
// copies name their device and switch to it for the call (DeviceScope).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace dtrain::kernels::cuda {

struct Context {
  int device = -1;                 // -1 until activated
  cudaStream_t compute = nullptr;  // every op on this GPU, in issue order
  cudaStream_t copy = nullptr;     // uploads of new tensors from pinned memory
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t cudnn = nullptr;
};

// The most GPUs one process can use.
constexpr int kMaxGpus = 64;

// The calling thread's current GPU (-1 before any activate()); use_device()
// (cuda_ops.h) chooses it.
int current_device() noexcept;

// The current GPU's context, with the calling thread bound to it (cudaSetDevice);
// throws InternalError when no GPU was activated.
Context& context();
// The context of GPU `index` as it is (device -1 when not activated), without
// checks or thread binding: for callers that bound the thread already or must
// not throw.
Context& raw_context(int index) noexcept;
// The current GPU's raw context.
Context& raw_context() noexcept;

// Makes the current GPU CUDA's current device on the calling thread (each
// thread starts on device 0). try_bind_thread() returns the status instead of
// throwing; both do nothing before activate().
cudaError_t try_bind_thread() noexcept;
void bind_thread();

// The calling thread on GPU `index` (current and bound) until the scope ends,
// then back on its previous GPU. Never throws: status() says whether binding
// worked (it fails when CUDA is shut down at exit).
class DeviceScope {
 public:
  explicit DeviceScope(int index) noexcept;
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t status() const { return status_; }

 private:
  int previous_;
  cudaError_t status_;
};

// TF32 for cuDNN convolutions (PyTorch's default: on); matmuls stay FP32.
bool allow_tf32() noexcept;

}  // namespace dtrain::kernels::cuda
