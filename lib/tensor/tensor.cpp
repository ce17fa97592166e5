// Implementation of tensor.h (CPU storage).
#include "tensor/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/error.h"

namespace dtrain {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    DT_CHECK_GE(d, 0);
    n *= d;
  }
  return n;
}

Tensor::Tensor(Shape shape, Device device) : shape_(std::move(shape)), device_(device) {
  DT_CHECK(device_.is_cpu(), "only CPU tensors are built in this version, got ", device_.str());
  numel_ = shape_numel(shape_);
  const size_t bytes = std::max<size_t>(64, (static_cast<size_t>(numel_) * sizeof(float) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw RuntimeError(str("out of memory allocating a tensor of shape ", shape_str(shape_)));
  std::memset(p, 0, bytes);
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

Tensor Tensor::clone() const {
  Tensor t(shape_, device_);
  if (numel_) std::memcpy(t.data(), data(), bytes());
  return t;
}

void Tensor::fill(float value) { std::fill(data(), data() + numel_, value); }

void Tensor::copy_from(const Tensor& other) {
  DT_CHECK_EQ(other.numel(), numel_);
  if (numel_) std::memcpy(data(), other.data(), bytes());
}

}  // namespace dtrain
