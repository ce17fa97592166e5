// Implementation of arena.h.
#include "tensor/arena.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain {

TensorArena::TensorArena(Device device, int64_t capacity_floats)
    : base_(Shape{std::max<int64_t>(capacity_floats, 1)}, device), capacity_(capacity_floats) {}

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
