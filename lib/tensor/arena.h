// TensorArena: one allocation on a device, handed out as tensors in order (a
// bump allocator). A model's parameters, gradients and optimizer state live in
// one arena, so a run allocates them once and a fused optimizer kernel can walk
// all parameters as one flat range (each tensor is padded to kAlignFloats, and
// the padding stays zero).
#pragma once

#include <cstdint>
#include <memory>

#include "tensor/tensor.h"

namespace dtrain {

class TensorArena {
 public:
  static constexpr int64_t kAlignFloats = 64;  // 256 bytes, what cuBLAS/cuDNN like
  static int64_t padded(int64_t numel) { return (numel + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

  // Allocates `capacity_floats` zero-filled floats on `device`.
  TensorArena(Device device, int64_t capacity_floats);
  // An arena over `base`, a zero-filled 1-D float32 tensor the caller made (e.g.
  // Tensor::over_host_memory): its whole length is the capacity.
  explicit TensorArena(Tensor base);

  // The next `shape`-sized tensor of the arena (zero-filled, sharing its storage).
  // Throws InternalError when the arena is full: the capacity was computed wrongly.
  Tensor take(const Shape& shape);

  const Device& device() const { return base_.device(); }
  int64_t capacity() const { return capacity_; }
  int64_t used() const { return used_; }

 private:
  Tensor base_;  // the whole arena, 1-D
  int64_t capacity_ = 0;
  int64_t used_ = 0;
};

}  // namespace dtrain
