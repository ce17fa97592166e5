// Implementation of errors.h: turns a failed CUDA, cuBLAS(Lt) or cuDNN status into
// a dtrain::CudaError with the library's own name and text for it, the call and
// its file:line; cudaErrorMemoryAllocation becomes an out-of-memory message that
// says what to make smaller.
#include "kernels/cuda/errors.h"

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::kernels::cuda {

void throw_cuda_error(const char* call, cudaError_t status, const char* file, int line) {
  if (status == cudaErrorMemoryAllocation)
    throw CudaError(str("the GPU is out of memory (", call, " at ", file, ":", line,
                        "): use a smaller train.batch_size_per_replica or model"));
  throw CudaError(str("CUDA error ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ") in ", call,
                      " at ", file, ":", line));
}

void throw_cublas_error(const char* call, cublasStatus_t status, const char* file, int line) {
  throw CudaError(str("cuBLAS error ", cublasLtGetStatusName(status), " (", cublasLtGetStatusString(status),
                      ") in ", call, " at ", file, ":", line));
}

void throw_cudnn_error(const char* call, cudnnStatus_t status, const char* file, int line) {
  throw CudaError(str("cuDNN error ", cudnnGetErrorString(status), " in ", call, " at ", file, ":", line));
}

}  // namespace dtrain::kernels::cuda
