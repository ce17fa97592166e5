// Implementation of reduction.h.
#include "comm/reduction.h"

#include <cstring>

namespace dtrain::comm {

void sum_in_rank_order(const float* const* inputs, int count, size_t n, float* out) {
  if (n == 0 || count == 0) return;
  if (out != inputs[0]) std::memcpy(out, inputs[0], n * sizeof(float));
  for (int r = 1; r < count; ++r) {
    const float* in = inputs[r];
    for (size_t i = 0; i < n; ++i) out[i] += in[i];
  }
}

void divide_by_size(float* data, size_t n, int size) {
  const float d = static_cast<float>(size);
  for (size_t i = 0; i < n; ++i) data[i] /= d;
}

}  // namespace dtrain::comm
