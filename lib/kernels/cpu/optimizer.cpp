// Optimizer updates on the CPU: the formulas of element_math.h in loops that
// vectorise. This file is built with -fno-math-errno (so sqrtf is sqrtps) and
// each loop twice, for AVX2 and for the baseline, the CPU picking one when the
// program loads. Both give the same bits: the "avx2" target has no FMA to
// contract with, and sqrt and division are exactly rounded. Chunks run in
// parallel; the updates are element-wise, so results do not depend on threads.
#include <algorithm>

#include "core/check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/element_math.h"

namespace dtrain::kernels::cpu {
namespace {

template <class F>
void for_chunks(int64_t n, F fn) {
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(kChunk, n - c * kChunk));
}

[[gnu::target_clones("avx2", "default")]]
void sgd_loop(float* __restrict w, const float* __restrict g, int64_t n, float lr) {
  for (int64_t i = 0; i < n; ++i) w[i] -= lr * g[i];
}

[[gnu::target_clones("avx2", "default")]]
void momentum_loop(float* __restrict w, const float* __restrict g, float* __restrict v, int64_t n,
                   SgdCoeffs k) {
  for (int64_t i = 0; i < n; ++i) math::sgd_element(w[i], g[i], v[i], k);
}

[[gnu::target_clones("avx2", "default")]]
void adam_loop(float* __restrict w, const float* __restrict g, float* __restrict m, float* __restrict v,
               int64_t n, AdamCoeffs k) {
  for (int64_t i = 0; i < n; ++i) math::adam_element(w[i], g[i], m[i], v[i], k);
}

}  // namespace

void sgd_update(Tensor& w, const Tensor& g, Tensor* velocity, const SgdCoeffs& k) {
  DT_CHECK_EQ(w.numel(), g.numel());
  float* pw = w.data();
  const float* pg = g.data();
  if (k.momentum == 0.0f) {
    for_chunks(w.numel(), [&](int64_t i, int64_t count) { sgd_loop(pw + i, pg + i, count, k.lr); });
    return;
  }
  DT_CHECK(velocity && velocity->numel() == w.numel(), "sgd with momentum needs a velocity slot");
  float* pv = velocity->data();
  for_chunks(w.numel(), [&](int64_t i, int64_t count) { momentum_loop(pw + i, pg + i, pv + i, count, k); });
}

void adam_update(Tensor& w, const Tensor& g, Tensor& m, Tensor& v, const AdamCoeffs& k) {
  DT_CHECK_EQ(w.numel(), g.numel());
  DT_CHECK_EQ(w.numel(), m.numel());
  DT_CHECK_EQ(w.numel(), v.numel());
  float* pw = w.data();
  const float* pg = g.data();
  float* pm = m.data();
  float* pv = v.data();
  for_chunks(w.numel(), [&](int64_t i, int64_t count) { adam_loop(pw + i, pg + i, pm + i, pv + i, count, k); });
}

}  // namespace dtrain::kernels::cpu
