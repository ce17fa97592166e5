// The CUDA backend's op functions: ops.h's signatures (backend_ops.inc) in
// dtrain::kernels::cuda, for tensors on a GPU, plus the device functions
// device.cpp forwards to. No CUDA header here: ops.cpp and device.cpp (host
// compiler) include this file in CUDA builds only.
#pragma once

#include <string>

#include "kernels/device.h"
#include "kernels/ops.h"

namespace dtrain::kernels::cuda {

GpuReport list_gpus(bool free_memory);
// Sets GPU `index` up for this process (streams, library handles; the first one
// also registers the DeviceMemory of cuda tensors). Several GPUs may be set up;
// the first is every thread's GPU until a thread chooses another.
void activate(int index);
// Makes GPU `index` the calling thread's GPU for the ops it issues.
void use_device(int index);
void synchronize(int index);
void* compute_stream(int index);  // GPU `index`'s compute stream (a cudaStream_t)
size_t reserved_bytes(int index);  // what GPU `index`'s caching allocator holds from CUDA
void set_allow_tf32(bool allow);
std::string library_versions();  // "CUDA runtime 13.0, cuBLASLt 13.1.0, cuDNN 9.19.0"

#include "kernels/backend_ops.inc"

// float32 <-> bfloat16 (ops.h's cast; float16 is not done here).
void cast(const Tensor& x, Tensor& y);

}  // namespace dtrain::kernels::cuda
