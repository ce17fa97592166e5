// The element-wise arithmetic the communicators share (internal to lib/comm):
// a reduction in rank order, so every member gets bit-identical sums whatever the
// timing, and kMean's division.
#pragma once

#include <cstddef>

namespace dtrain::comm {

// out[0..n) = inputs[0][i] + inputs[1][i] + ... + inputs[count-1][i], added in
// that order. `out` may be one of the inputs only if it is inputs[0].
void sum_in_rank_order(const float* const* inputs, int count, size_t n, float* out);

// kMean's last step: data[0..n) divided by `size` (a division, not a
// multiplication by a rounded 1/size, so a mean that a float can hold comes out
// exact; for a power of two, whose 1/size is exact, the multiplication gives the
// same bits and is what runs).
void divide_by_size(float* data, size_t n, int size);

}  // namespace dtrain::comm
