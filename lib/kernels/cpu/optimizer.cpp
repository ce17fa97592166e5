// Optimizer updates and gradient clipping on the CPU: the formulas of
// element_math.h in loops that vectorise. This file is built with
// -fno-math-errno (so sqrtf is sqrtps) and each loop twice, for AVX2 and for the
// baseline, the CPU picking one when the program loads. Both give the same bits:
// the "avx2" target has no FMA to contract with, and sqrt and division are
// exactly rounded. Chunks run in parallel; the updates are element-wise, so
// results do not depend on threads, and a sum of squares adds fixed chunks' sums
// in chunk order, so it does not either.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/element_math.h"

namespace dtrain::kernels::cpu {
namespace {

constexpr int64_t kChunk = 16384;

template <class F>
void for_chunks(int64_t n, F fn) {
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

[[gnu::target_clones("avx2", "default")]]
void rmsprop_loop(float* __restrict w, const float* __restrict g, float* __restrict v, float* __restrict m,
                  float* __restrict a, int64_t n, RmspropCoeffs k) {
  float unused_m = 0.0f, unused_a = 0.0f;  // for the slots this variant has not
  for (int64_t i = 0; i < n; ++i)
    math::rmsprop_element(w[i], g[i], v[i], m ? m[i] : unused_m, a ? a[i] : unused_a, k);
}

[[gnu::target_clones("avx2", "default")]]
void adagrad_loop(float* __restrict w, const float* __restrict g, float* __restrict a, int64_t n, AdagradCoeffs k) {
  for (int64_t i = 0; i < n; ++i) math::adagrad_element(w[i], g[i], a[i], k);
}

double squares_loop(const float* x, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  return sum;
}

[[gnu::target_clones("avx2", "default")]]
void clip_norm_loop(float* __restrict x, int64_t n, float norm, float clip) {
  for (int64_t i = 0; i < n; ++i) x[i] = math::clip_by_norm_element(x[i], norm, clip);
}

[[gnu::target_clones("avx2", "default")]]
void clip_value_loop(float* __restrict x, int64_t n, float limit) {
  for (int64_t i = 0; i < n; ++i) x[i] = math::clip_by_value_element(x[i], limit);
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

void rmsprop_update(Tensor& w, const Tensor& g, Tensor& velocity, Tensor* momentum, Tensor* average_gradient,
                    const RmspropCoeffs& k) {
  float* pw = w.data();
  const float* pg = g.data();
  float* pv = velocity.data();
  float* pm = k.momentum > 0.0f ? momentum->data() : nullptr;
  float* pa = k.centered ? average_gradient->data() : nullptr;
  for_chunks(w.numel(), [&](int64_t i, int64_t count) {
    rmsprop_loop(pw + i, pg + i, pv + i, pm ? pm + i : nullptr, pa ? pa + i : nullptr, count, k);
  });
}

void adagrad_update(Tensor& w, const Tensor& g, Tensor& accumulator, const AdagradCoeffs& k) {
  float* pw = w.data();
  const float* pg = g.data();
  float* pa = accumulator.data();
  for_chunks(w.numel(), [&](int64_t i, int64_t count) { adagrad_loop(pw + i, pg + i, pa + i, count, k); });
}

void sum_of_squares(const Tensor& x, Tensor& out) {
  DT_CHECK_EQ(out.numel(), 1);
  const float* px = x.data();
  std::vector<double> chunk_sums(static_cast<size_t>((x.numel() + kChunk - 1) / kChunk));
  for_chunks(x.numel(), [&](int64_t i, int64_t count) { chunk_sums[i / kChunk] = squares_loop(px + i, count); });
  double sum = 0.0;
  for (double s : chunk_sums) sum += s;
  out.data()[0] = static_cast<float>(sum);
}

void clip_by_norm(Tensor& x, const Tensor& squares, float clip_norm) {
  double sum = 0.0;
  for (int64_t i = 0; i < squares.numel(); ++i) sum += squares.data()[i];
  const float norm = std::sqrt(static_cast<float>(sum));
  float* px = x.data();
  for_chunks(x.numel(), [&](int64_t i, int64_t count) { clip_norm_loop(px + i, count, norm, clip_norm); });
}

void clip_by_value(Tensor& x, float limit) {
  float* px = x.data();
  for_chunks(x.numel(), [&](int64_t i, int64_t count) { clip_value_loop(px + i, count, limit); });
}

}  // namespace dtrain::kernels::cpu
