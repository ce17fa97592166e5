// The CUDA backend's error checks, internal to lib/kernels/cuda: DT_CUDA_CHECK,
// DT_CUBLAS_CHECK and DT_CUDNN_CHECK wrap a call and, when it fails, throw a
// dtrain::CudaError naming the library's status, the call and its file:line (the
// GPU running out of memory says so and what to shrink).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

namespace dtrain::kernels::cuda {

[[noreturn]] void throw_cuda_error(const char* call, cudaError_t status, const char* file, int line);
[[noreturn]] void throw_cublas_error(const char* call, cublasStatus_t status, const char* file, int line);
[[noreturn]] void throw_cudnn_error(const char* call, cudnnStatus_t status, const char* file, int line);

// One checked call: `Status` is the library's status type, `ok` its success value
// and `thrower` the function above that throws for it; `text` is the call as written.
#define DT_CUDA_LIBRARY_CHECK_(Status, ok, thrower, call, text)                                   \
  do {                                                                                            \
    const Status dt_status_ = (call);                                                             \
    if (dt_status_ != ok) ::dtrain::kernels::cuda::thrower(text, dt_status_, __FILE__, __LINE__); \
  } while (0)
#define DT_CUDA_CHECK(call) DT_CUDA_LIBRARY_CHECK_(cudaError_t, cudaSuccess, throw_cuda_error, call, #call)
#define DT_CUBLAS_CHECK(call) \
  DT_CUDA_LIBRARY_CHECK_(cublasStatus_t, CUBLAS_STATUS_SUCCESS, throw_cublas_error, call, #call)
#define DT_CUDNN_CHECK(call) DT_CUDA_LIBRARY_CHECK_(cudnnStatus_t, CUDNN_STATUS_SUCCESS, throw_cudnn_error, call, #call)

}  // namespace dtrain::kernels::cuda
