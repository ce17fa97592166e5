// Implementation of arena.h.
#include "tensor/arena.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain {

TensorArena::TensorArena(Device device, int64_t capacity_floats)
    : base_(Shape{std::max<int64_t>(capacity_floats, 1)}, device), capacity_(capacity_floats) {}

TensorArena::TensorArena(Tensor base) : base_(std::move(base)), capacity_(base_.numel()) {
  DT_CHECK(base_.rank() == 1 && base_.dtype() == DType::kF32, "an arena is a 1-D float32 tensor");
}

Tensor TensorArena::take(const Shape& shape) {
  const int64_t n = shape_numel(shape);
  const int64_t size = padded(n);
  if (used_ + size > capacity_)
    throw InternalError(str("tensor arena on ", device().str(), " is full: ", used_, " + ", size, " of ",
                            capacity_, " floats"));
  Tensor t = base_.flat_slice(used_, n).reshaped(shape);
  used_ += size;
  return t;
}

}  // namespace dtrain
