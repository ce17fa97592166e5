// Host-to-device copies of the CUDA backend, internal to lib/kernels/cuda: host
// data goes through a ring of pinned staging buffers, so the caller's memory is
// free at once and the host never waits for the copy.
#pragma once

#include <cstddef>

namespace dtrain::kernels::cuda {

// Into a new tensor's block: on the copy stream, overlapping the ops already
// issued; the compute stream waits for it before the ops issued from now on.
void upload_new(void* dst, const void* src, size_t bytes);
// Into an existing tensor: on the compute stream, after the ops issued so far
// (which may still read dst).
void upload_ordered(void* dst, const void* src, size_t bytes);

}  // namespace dtrain::kernels::cuda
