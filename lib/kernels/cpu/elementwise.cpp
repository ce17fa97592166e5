// Own loops for what oneDNN has no primitive for: dropout masks, products, axpy,
// division and moving averages.
// Each loop is data-parallel with OpenMP and writes each element once, so results
// do not depend on the thread count.
#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/cpu_ops.h"

namespace dtrain::kernels::cpu {

void dropout_forward(const Tensor& x, float rate, uint64_t seed, Tensor& y, Tensor& mask) {
  DT_CHECK_EQ(x.numel(), y.numel());
  DT_CHECK_EQ(x.numel(), mask.numel());
  DT_CHECK(rate >= 0.0f && rate < 1.0f, "dropout rate ", rate);
  const float keep_scale = 1.0f / (1.0f - rate);
  const int64_t n = x.numel();
  const float* in = x.data();
  float* out = y.data();
  float* m = mask.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float u = u64_to_unit_float(hash_u64(seed, static_cast<uint64_t>(i)));
    m[i] = u < rate ? 0.0f : keep_scale;
    out[i] = in[i] * m[i];
  }
}

void multiply(const Tensor& a, const Tensor& b, Tensor& out) {
  DT_CHECK_EQ(a.numel(), b.numel());
  DT_CHECK_EQ(a.numel(), out.numel());
  const int64_t n = a.numel();
  const float* pa = a.data();
  const float* pb = b.data();
  float* po = out.data();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) po[i] = pa[i] * pb[i];
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  DT_CHECK_EQ(x.numel(), y.numel());
  const int64_t n = x.numel();
  const float* px = x.data();
  float* py = y.data();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) py[i] += alpha * px[i];
}

void divide(Tensor& x, float divisor) {
  const int64_t n = x.numel();
  float* p = x.data();
  for (int64_t i = 0; i < n; ++i) p[i] /= divisor;
}

void moving_average(Tensor& avg, const Tensor& x, float momentum) {
  DT_CHECK_EQ(avg.numel(), x.numel());
  const int64_t n = x.numel();
  float* a = avg.data();
  const float* px = x.data();
  for (int64_t i = 0; i < n; ++i) a[i] = momentum * a[i] + (1.0f - momentum) * px[i];
}

}  // namespace dtrain::kernels::cpu
