// Implementation of tensor.h: host storage for the CPU, the registered
// DeviceMemory for other devices.
#include "tensor/tensor.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "tensor/bfloat16.h"
#include "tensor/device_memory.h"
#include "tensor/memory_scope.h"

namespace dtrain {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
  }
  return "?";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    DT_CHECK_GE(d, 0);
    n *= d;
  }
  return n;
}

Tensor::Tensor(Shape shape, Device device, DType dtype)
    : shape_(std::move(shape)), device_(device), dtype_(dtype) {
  allocate(true);
}

Tensor::Tensor(Shape shape, Device device, DType dtype, Uninitialized)
    : shape_(std::move(shape)), device_(device), dtype_(dtype) {
  allocate(false);
}

Tensor Tensor::over_host_memory(std::shared_ptr<float> memory, int64_t numel) {
  DT_CHECK(memory != nullptr && numel >= 0, "over_host_memory needs memory");
  Tensor t;
  t.shape_ = {numel};
  t.numel_ = numel;
  t.device_ = Device::cpu();
  t.dtype_ = DType::kF32;
  // The aliasing constructor: shares ownership of `memory`, points at its bytes.
  t.storage_ = std::shared_ptr<uint8_t>(memory, reinterpret_cast<uint8_t*>(memory.get()));
  return t;
}

namespace {
thread_local bool t_unfilled = false;  // an UnfilledTensors is alive on this thread

// This machine's memory and swap, in bytes.
size_t host_memory_bytes() {
  static const size_t bytes = [] {
    struct sysinfo info {};
    if (sysinfo(&info) != 0) return std::numeric_limits<size_t>::max();
    return static_cast<size_t>(info.totalram + info.totalswap) * info.mem_unit;
  }();
  return bytes;
}

}  // namespace

UnfilledTensors::UnfilledTensors() : previous_(t_unfilled) { t_unfilled = true; }
UnfilledTensors::~UnfilledTensors() { t_unfilled = previous_; }

void Tensor::allocate(bool zero) {
  numel_ = shape_numel(shape_);
  const size_t bytes = std::max<size_t>(64, (static_cast<size_t>(numel_) * dtype_size(dtype_) + 63) / 64 * 64);
  const Device device = device_;
  void* p = nullptr;
  if (!device_.is_cpu()) {
    p = device_memory(device_.type).allocate(device_, bytes, zero);
  } else {
    // (more than the machine's memory and swap can never be backed: refused
    // without asking the allocator, which may promise it, or abort under ASan)
    if (bytes > host_memory_bytes() || !(p = std::aligned_alloc(64, bytes)))
      throw OutOfMemory(str("out of memory allocating a tensor of shape ", shape_str(shape_), " (",
                            format_bytes(static_cast<double>(bytes)), ")"));
    if (zero && !t_unfilled) std::memset(p, 0, bytes);
  }
  // Frees the storage, and counts it out of the memory scope it was counted in.
  const auto release = [device, bytes](void* q) {
    if (device.is_cpu()) std::free(q);
    else device_memory(device.type).deallocate(device, q, bytes);
  };
  std::shared_ptr<MemoryScope::Counters> scope = memory_scope_detail::active_counters();
  if (!scope) {
    storage_ = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), release);
    return;
  }
  memory_scope_detail::allocated(*scope, device.type, static_cast<int64_t>(bytes));
  storage_ = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [release, scope, device, bytes](uint8_t* q) {
    release(q);
    memory_scope_detail::freed(*scope, device.type, static_cast<int64_t>(bytes));
  });
}

void* Tensor::typed(DType want) const {
  if (dtype_ != want)
    throw InternalError(str("a ", dtype_name(dtype_), " tensor of shape ", shape_str(shape_), " read as ",
                            dtype_name(want)));
  return storage_.get() + offset_ * dtype_size(dtype_);
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
  DT_CHECK(first.dtype_ == last.dtype_, "span over tensors of different dtypes");
  const int64_t end = last.offset_ + last.numel_;
  DT_CHECK(end >= first.offset_, "span: the last tensor lies before the first");
  Tensor t = first;
  t.shape_ = {end - first.offset_};
  t.numel_ = end - first.offset_;
  return t;
}

Tensor Tensor::clone() const {
  Tensor t(shape_, device_, dtype_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(const Device& device) const {
  if (device == device_) return *this;
  Tensor t(shape_, device, dtype_, Uninitialized{});
  if (device_.is_cpu() && numel_ > 0) {
    // Host to device: an asynchronous upload (the new tensor is not yet in use).
    device_memory(device.type).upload_new(device, t.raw(), raw(), bytes());
    return t;
  }
  t.copy_from(*this);
  return t;
}

void Tensor::fill(float value) {
  if (dtype_ == DType::kBF16 && device_.is_cpu()) {
    std::fill(data_bf16(), data_bf16() + numel_, f32_to_bf16(value));
    return;
  }
  if (dtype_ == DType::kF16 && device_.is_cpu()) {
    std::fill(data_f16(), data_f16() + numel_, f32_to_f16(value));
    return;
  }
  if (device_.is_cpu()) {
    std::fill(data(), data() + numel_, value);
    return;
  }
  device_memory(device_.type).fill(device_, data(), numel_, value);
}

void Tensor::copy_from(const Tensor& other) {
  DT_CHECK_EQ(other.numel(), numel_);
  DT_CHECK(other.dtype_ == dtype_, "copy_from a ", dtype_name(other.dtype_), " tensor into a ", dtype_name(dtype_),
           " one (kernels::cast converts)");
  if (numel_ == 0) return;
  if (device_.is_cpu() && other.device_.is_cpu()) {
    std::memcpy(raw(), other.raw(), bytes());
    return;
  }
  // Whichever side is not the host names the backend that copies.
  const DeviceType backend = device_.is_cpu() ? other.device_.type : device_.type;
  device_memory(backend).copy(raw(), device_, other.raw(), other.device_, bytes());
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
