// DT_HOST_DEVICE: marks small inline functions that run on the host and, when the
// CUDA backend is compiled with nvcc, inside GPU kernels too (hashes for dropout,
// the per-element bodies of own kernels). Without nvcc it expands to nothing.
#pragma once

#if defined(__CUDACC__)
#define DT_HOST_DEVICE __host__ __device__
#else
#define DT_HOST_DEVICE
#endif
