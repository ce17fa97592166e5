// Tensor: a dense float32 array with a shape, on a device, with shared storage.
//
// Copies of a Tensor share storage (like a shared_ptr); clone() makes a deep copy.
// Activations are stored channels-last (NHWC), as Keras users see them; Dense
// kernels are (in, out) and Conv2D kernels (kh, kw, in, out), Keras' layouts.
// Storage is on the tensor's device: host memory for the CPU, device memory
// through the backend's DeviceMemory (device_memory.h) for a GPU, where data()
// is a device pointer that only kernels may dereference. Only float32 exists
// today; dtype is there so mixed precision can slot in.
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
  // Allocates a zero-filled tensor (64-byte aligned) on `device`.
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
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  float* data() { return storage_.get() + offset_; }
  const float* data() const { return storage_.get() + offset_; }

  // Same storage, another shape with the same number of elements.
  Tensor reshaped(Shape shape) const;

  // Rows [begin, begin + count) of the first dimension, sharing storage.
  Tensor slice_rows(int64_t begin, int64_t count) const;

  // Elements [begin, begin + count) of the flattened tensor as a 1-D tensor, sharing storage.
  Tensor flat_slice(int64_t begin, int64_t count) const;

  // One 1-D tensor from the first element of `first` to the last of `last`, which
  // must share storage with `first` and lie after it (a range of an arena).
  static Tensor span(const Tensor& first, const Tensor& last);

  // A deep copy with its own storage, on this tensor's device.
  Tensor clone() const;
  // A copy on `device` (this tensor itself when it is already there).
  Tensor to(const Device& device) const;
  // to(Device::cpu()): values the host can read.
  Tensor to_host() const { return to(Device::cpu()); }

  void fill(float value);
  void zero() { fill(0.0f); }
  // Copies another tensor's values (same numel), across devices if need be.
  void copy_from(const Tensor& other);
  void copy_to_host(float* dst) const;
  void copy_from_host(const float* src);

 private:
  struct Uninitialized {};
  Tensor(Shape shape, Device device, Uninitialized);
  void allocate(bool zero);

  Shape shape_;
  int64_t numel_ = 0;
  int64_t offset_ = 0;
  Device device_;
  std::shared_ptr<float> storage_;
};

}  // namespace dtrain
