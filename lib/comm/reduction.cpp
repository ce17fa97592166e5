// Implementation of reduction.h.
#include "comm/reduction.h"

#include <cstring>

namespace dtrain::comm {

void sum_in_rank_order(const float* const* inputs, int count, size_t n, float* out) {
  if (n == 0 || count == 0) return;
  if (count == 1) {
    if (out != inputs[0]) std::memcpy(out, inputs[0], n * sizeof(float));
    return;
  }
  // The first two in one pass (not a copy of the first, then an addition).
  const float* first = inputs[0];
  const float* second = inputs[1];
  for (size_t i = 0; i < n; ++i) out[i] = first[i] + second[i];
  for (int r = 2; r < count; ++r) {
    const float* in = inputs[r];
    for (size_t i = 0; i < n; ++i) out[i] += in[i];
  }
}

void divide_by_size(float* data, size_t n, int size) {
  const float d = static_cast<float>(size);
  if (size > 0 && (size & (size - 1)) == 0) {
    // A power of two: 1/size is exact, and x * (1/size) is the same real number
    // as x / size, rounded the same way: the same bits, without a division.
    const float reciprocal = 1.0f / d;
    for (size_t i = 0; i < n; ++i) data[i] *= reciprocal;
    return;
  }
  for (size_t i = 0; i < n; ++i) data[i] /= d;
}

}  // namespace dtrain::comm
