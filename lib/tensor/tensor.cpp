// Implementation of tensor.h: host storage for the CPU, the registered
// DeviceMemory for other devices.
#include "tensor/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/error.h"
#include "tensor/device_memory.h"

namespace dtrain {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    DT_CHECK_GE(d, 0);
    n *= d;
  }
  return n;
}

Tensor::Tensor(Shape shape, Device device) : shape_(std::move(shape)), device_(device) { allocate(true); }

Tensor::Tensor(Shape shape, Device device, Uninitialized) : shape_(std::move(shape)), device_(device) {
  allocate(false);
}

void Tensor::allocate(bool zero) {
  numel_ = shape_numel(shape_);
  const size_t bytes = std::max<size_t>(64, (static_cast<size_t>(numel_) * sizeof(float) + 63) / 64 * 64);
  if (!device_.is_cpu()) {
    DeviceMemory& memory = device_memory(device_.type);
    const Device device = device_;
    void* p = memory.allocate(device_, bytes, zero);
    storage_ = std::shared_ptr<float>(static_cast<float*>(p),
                                      [&memory, device, bytes](float* q) { memory.deallocate(device, q, bytes); });
    return;
  }
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw RuntimeError(str("out of memory allocating a tensor of shape ", shape_str(shape_)));
  if (zero) std::memset(p, 0, bytes);
  storage_ = std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { std::free(q); });
}

Tensor Tensor::reshaped(Shape shape) const {
  DT_CHECK_EQ(shape_numel(shape), numel_);
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t count) const {
  DT_CHECK(rank() >= 1);
  DT_CHECK(begin >= 0 && count >= 0 && begin + count <= shape_[0], "slice ", begin, "+", count,
           " of ", shape_str(shape_));
  const int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  Tensor t = *this;
  t.shape_[0] = count;
  t.numel_ = row * count;
  t.offset_ = offset_ + row * begin;
  return t;
}

Tensor Tensor::flat_slice(int64_t begin, int64_t count) const {
  DT_CHECK(begin >= 0 && count >= 0 && begin + count <= numel_, "flat slice ", begin, "+", count,
           " of ", numel_, " elements");
  Tensor t = *this;
  t.shape_ = {count};
  t.numel_ = count;
  t.offset_ = offset_ + begin;
  return t;
}

Tensor Tensor::span(const Tensor& first, const Tensor& last) {
  DT_CHECK(first.storage_ && first.storage_ == last.storage_, "span over tensors of different storage");
  const int64_t end = last.offset_ + last.numel_;
  DT_CHECK(end >= first.offset_, "span: the last tensor lies before the first");
  Tensor t = first;
  t.shape_ = {end - first.offset_};
  t.numel_ = end - first.offset_;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, device_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(const Device& device) const {
  if (device == device_) return *this;
  Tensor t(shape_, device, Uninitialized{});
  if (device_.is_cpu() && numel_ > 0) {
    // Host to device: an asynchronous upload (the new tensor is not yet in use).
    device_memory(device.type).upload_new(device, t.data(), data(), bytes());
    return t;
  }
  t.copy_from(*this);
  return t;
}

void Tensor::fill(float value) {
  if (device_.is_cpu()) {
    std::fill(data(), data() + numel_, value);
    return;
  }
  device_memory(device_.type).fill(device_, data(), numel_, value);
}

void Tensor::copy_from(const Tensor& other) {
  DT_CHECK_EQ(other.numel(), numel_);
  if (numel_ == 0) return;
  if (device_.is_cpu() && other.device_.is_cpu()) {
    std::memcpy(data(), other.data(), bytes());
    return;
  }
  // Whichever side is not the host names the backend that copies.
  const DeviceType backend = device_.is_cpu() ? other.device_.type : device_.type;
  device_memory(backend).copy(data(), device_, other.data(), other.device_, bytes());
}

void Tensor::copy_to_host(float* dst) const {
  if (numel_ == 0) return;
  if (device_.is_cpu()) {
    std::memcpy(dst, data(), bytes());
    return;
  }
  device_memory(device_.type).copy(dst, Device::cpu(), data(), device_, bytes());
}

void Tensor::copy_from_host(const float* src) {
  if (numel_ == 0) return;
  if (device_.is_cpu()) {
    std::memcpy(data(), src, bytes());
    return;
  }
  device_memory(device_.type).copy(data(), device_, src, Device::cpu(), bytes());
}

}  // namespace dtrain
