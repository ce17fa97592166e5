// Tensor: a dense float32 array with a shape, on a device, with shared storage.
//
// Copies of a Tensor share storage (like a shared_ptr); clone() makes a deep copy.
// Activations are stored channels-last (NHWC), as Keras users see them; Dense
// kernels are (in, out) and Conv2D kernels (kh, kw, in, out), Keras' layouts.
// Only float32 on the CPU exists today; dtype and device are there so the CUDA
// backend and mixed precision can slot in.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/device.h"

namespace dtrain {

using Shape = std::vector<int64_t>;

enum class DType { kF32 };

int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Allocates a zero-filled tensor (64-byte aligned).
  explicit Tensor(Shape shape, Device device = Device::cpu());

  static Tensor zeros(Shape shape) { return Tensor(std::move(shape)); }

  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return static_cast<size_t>(numel_) * sizeof(float); }
  DType dtype() const { return DType::kF32; }
  const Device& device() const { return device_; }
  bool defined() const { return storage_ != nullptr; }

  float* data() { return storage_.get() + offset_; }
  const float* data() const { return storage_.get() + offset_; }

  // Same storage, another shape with the same number of elements.
  Tensor reshaped(Shape shape) const;

  // Rows [begin, begin + count) of the first dimension, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t count) const;

  // A deep copy with its own storage.
  Tensor clone() const;

  void fill(float value);
  void zero() { fill(0.0f); }
  void copy_from(const Tensor& other);  // same numel required

 private:
  Shape shape_;
  int64_t numel_ = 0;
  int64_t offset_ = 0;
  Device device_;
  std::shared_ptr<float> storage_;
};

}  // namespace dtrain
