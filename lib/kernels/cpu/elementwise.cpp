// Own loops for what oneDNN has no primitive for: dropout masks, products, axpy,
// division, moving averages and the non-finite flag.
// Each loop is data-parallel with OpenMP and writes each element once, so results
// do not depend on the thread count. Dropout and multiply also take bfloat16
// data (mixed precision) with a float32 mask.
#include <cmath>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/cpu_ops.h"
#include "tensor/bfloat16.h"

namespace dtrain::kernels::cpu {
namespace {

template <class T>
void dropout_loop(const T* in, float rate, uint64_t seed, T* out, float* m, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    m[i] = dropout_multiplier(seed, static_cast<uint64_t>(i), rate);
    store(out + i, value_of(in[i]) * m[i]);
  }
}

// out = a * b, b float32.
template <class T>
void multiply_loop(const T* pa, const float* pb, T* po, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) store(po + i, value_of(pa[i]) * pb[i]);
}

}  // namespace

void dropout_forward(const Tensor& x, float rate, uint64_t seed, Tensor& y, Tensor& mask) {
  DT_CHECK_EQ(x.numel(), y.numel());
  DT_CHECK_EQ(x.numel(), mask.numel());
  DT_CHECK(x.dtype() == y.dtype(), "dropout between dtypes");
  DT_CHECK(rate >= 0.0f && rate < 1.0f, "dropout rate ", rate);
  if (x.dtype() == DType::kBF16)
    return dropout_loop(x.data_bf16(), rate, seed, y.data_bf16(), mask.data(), x.numel());
  dropout_loop(x.data(), rate, seed, y.data(), mask.data(), x.numel());
}

void multiply(const Tensor& a, const Tensor& b, Tensor& out) {
  DT_CHECK_EQ(a.numel(), b.numel());
  DT_CHECK_EQ(a.numel(), out.numel());
  DT_CHECK(a.dtype() == out.dtype(), "multiply between dtypes");
  if (a.dtype() == DType::kBF16) return multiply_loop(a.data_bf16(), b.data(), out.data_bf16(), a.numel());
  multiply_loop(a.data(), b.data(), out.data(), a.numel());
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  DT_CHECK_EQ(x.numel(), y.numel());
  const int64_t n = x.numel();
  const float* px = x.data();
  float* py = y.data();
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) py[i] += alpha * px[i];
}

void flag_non_finite(const Tensor& x, Tensor& flag) {
  const float* p = x.data();
  for (int64_t i = 0; i < x.numel(); ++i)
    if (!std::isfinite(p[i])) {
      flag.data()[0] = 1.0f;
      return;
    }
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
