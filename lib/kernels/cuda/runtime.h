// The CUDA backend's runtime as the ops see it, internal to lib/kernels/cuda:
// error checks (errors.h), the per-process GPU context with its streams and
// cuBLASLt and cuDNN handles (device.h), and device memory from the caching
// allocator with scratch buffers (allocator.h); uploader.h holds the host copies.
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

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/errors.h"
