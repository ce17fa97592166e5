// Tensor: a dense float32 array with a shape, on a device, with shared storage.
//
// Copies of a Tensor share storage (like a shared_ptr); clone() makes a deep copy.
// Activations are stored channels-last (NHWC), as Keras users see them; Dense
// kernels are (in, out) and Conv2D kernels (kh, kw, in, out), Keras' layouts.
// Storage is on the tensor's device: host memory for the CPU, device memory
// through the backend's DeviceMemory (device_memory.h) for a GPU, where data()
// is a device pointer that only kernels may dereference. The element type is
// float32, or bfloat16 / float16 (16-bit) for the compute of mixed precision
// (train.precision): data() is the float32 view and checks the type; raw(),
// data_bf16() and data_f16() serve the others.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tensor/device.h"
#include "tensor/float16.h"

namespace dtrain {

using Shape = std::vector<int64_t>;

enum class DType { kF32, kBF16, kF16 };

const char* dtype_name(DType dtype);
inline size_t dtype_size(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Allocates a zero-filled tensor (64-byte aligned) of `dtype` on `device`.
  explicit Tensor(Shape shape, Device device = Device::cpu(), DType dtype = DType::kF32);

  static Tensor zeros(Shape shape) { return Tensor(std::move(shape)); }
  // A tensor whose values are left as they come (not zeroed): for one the caller
  // writes whole next, where zeroing it first would be a wasted pass.
  static Tensor uninitialized(Shape shape, Device device = Device::cpu(), DType dtype = DType::kF32) {
    return Tensor(std::move(shape), device, dtype, Uninitialized{});
  }

  // A 1-D float32 host tensor over `numel` floats at `memory`, which the tensor
  // (and every view of it) keeps alive through the shared_ptr: memory that is not
  // the allocator's, e.g. a shared-memory segment (Communicator::shared_area).
  static Tensor over_host_memory(std::shared_ptr<float> memory, int64_t numel);

  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int64_t numel() const { return numel_; }
  size_t bytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  const Device& device() const { return device_; }
  bool defined() const { return storage_ != nullptr; }
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  // The elements as float32; an InternalError for a tensor of another dtype.
  float* data() { return static_cast<float*>(typed(DType::kF32)); }
  const float* data() const { return static_cast<const float*>(typed(DType::kF32)); }
  // The elements as bfloat16 bits (bfloat16.h); DType::kBF16 only.
  uint16_t* data_bf16() { return static_cast<uint16_t*>(typed(DType::kBF16)); }
  const uint16_t* data_bf16() const { return static_cast<const uint16_t*>(typed(DType::kBF16)); }
  // The elements as float16 bits (float16.h); DType::kF16 only.
  f16_bits* data_f16() { return static_cast<f16_bits*>(typed(DType::kF16)); }
  const f16_bits* data_f16() const { return static_cast<const f16_bits*>(typed(DType::kF16)); }
  // The first element's bytes, whatever the dtype.
  void* raw() { return storage_.get() + offset_ * dtype_size(dtype_); }
  const void* raw() const { return storage_.get() + offset_ * dtype_size(dtype_); }

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

  // Every element = value (rounded to the dtype).
  void fill(float value);
  void zero() { fill(0.0f); }
  // Copies another tensor's values (same numel and dtype), across devices if need
  // be. Changing the dtype is kernels::cast's work.
  void copy_from(const Tensor& other);
  // float32 tensors only.
  void copy_to_host(float* dst) const;
  void copy_from_host(const float* src);

 private:
  struct Uninitialized {};
  Tensor(Shape shape, Device device, DType dtype, Uninitialized);
  void allocate(bool zero);
  // raw(), after checking that the dtype is `want`.
  void* typed(DType want) const;

  Shape shape_;
  int64_t numel_ = 0;
  int64_t offset_ = 0;
  Device device_;
  DType dtype_ = DType::kF32;
  std::shared_ptr<uint8_t> storage_;
};

// While one exists on this thread, new CPU tensors are not zero-filled: their
// pages stay untouched (and unbacked) until written. For code that builds layers
// only to read their shapes and sizes (nn::describe_layers, the memory
// estimate), so that a model too large for the machine is measured, not filled.
class UnfilledTensors {
 public:
  UnfilledTensors();
  ~UnfilledTensors();
  UnfilledTensors(const UnfilledTensors&) = delete;
  UnfilledTensors& operator=(const UnfilledTensors&) = delete;

 private:
  bool previous_;
};

}  // namespace dtrain
