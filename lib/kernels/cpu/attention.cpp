// Scaled dot-product attention on the CPU, in blocks (flash attention).
//
// Forward: for each (sample, head) and each block of 64 query rows, the key
// blocks are visited in order (up to the diagonal when causal) with an online
// softmax: a running row maximum m and sum l, the partial output rescaled by
// exp(m_old - m_new) whenever the maximum grows. Only a 64 x 64 score block
// exists at a time; what is kept for the backward pass is the output and each
// row's log-sum-exp (lse = m + log l), T floats per head instead of T x T.
//
// Backward (FlashAttention-2's): D_i = dout_i . out_i; for each key block and
// each query block that sees it, the probabilities are recomputed from lse,
// P = exp(scale q k^T - lse), then dv += P^T dout, dP = dout v^T,
// dS = P * (dP - D), dq += scale dS k, dk += scale dS^T q.
//
// Dropout on the weights (p.dropout > 0): the forward pass multiplies each
// block's probabilities by their dropout_multiplier after the row sum (the
// normaliser stays the undropped one) and before they meet v; the backward pass
// remakes the same multipliers Z from (seed, position), so dv += (P Z)^T dout,
// dP = (dout v^T) Z, and D = dout . out still holds (out = (P Z) v).
//
// The block products are oneDNN's dnnl_sgemm on strided views of the
// (N, T, H, D) tensors; the exponentials are a polynomial the compiler
// vectorises (exp_approx, within 2 ulp of expf); masked scores are never
// exponentiated (each row's causal bound). (sample, head) pairs run in parallel
// with OpenMP, each writing only its own slices, in a fixed order: results do
// not depend on the thread count.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"

namespace dtrain::kernels::cpu {
namespace {

constexpr int64_t kBlock = 64;  // query and key rows per block
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp(x) for x <= 0 (scores less their row's maximum): x = n ln2 + r, |r| <= ln2 / 2,
// exp(r) by its degree-6 Taylor polynomial (relative error < 2e-7), times 2^n
// built in the exponent bits. Below -87 (exp < 2^-126) it gives 2^-126 * exp(r),
// which no softmax sum notices. Branch-free, so loops over it vectorise.
[[gnu::always_inline]] inline float exp_approx(float x) {
  x = x > -87.0f ? x : -87.0f;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln2)
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

// The row loops apart (not inlined), where the vectoriser takes them; the
// reductions are vectorised (omp simd): a fixed order for a given build.
[[gnu::noinline]] float row_max(const float* row, int64_t n, float top) {
#pragma omp simd reduction(max : top)
  for (int64_t j = 0; j < n; ++j) top = row[j] > top ? row[j] : top;
  return top;
}

// row[j] = exp(row[j] - shift); returns their sum.
[[gnu::noinline]] float exp_shifted_sum(float* row, int64_t n, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    row[j] = exp_approx(row[j] - shift);
    sum += row[j];
  }
  return sum;
}

// The gradient of the scores: ds = p * (dp - delta), in place of dp.
[[gnu::noinline]] void score_grad(const float* p, float* dp, int64_t n, float delta) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - delta);
}

// z[j] = the dropout multiplier of weights (row, col0 + j), j < n: `row_key` is
// (pair * T + row) * T, the row's first element in the layout AttentionParams gives.
void dropout_row(const AttentionParams& p, uint64_t row_key, int64_t col0, int64_t n, float* z) {
  for (int64_t j = 0; j < n; ++j) z[j] = dropout_multiplier(p.seed, row_key + static_cast<uint64_t>(col0 + j), p.dropout);
}

// Row-major C = alpha op(A) op(B) + beta C; fails loudly rather than silently.
void gemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const dnnl_status_t status = dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  DT_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(status));
}

// The views of one (sample, head): row t of q is q + t * ld_k, and so on.
struct HeadViews {
  int64_t t = 0, dk = 0, dv = 0, ld_k = 0, ld_v = 0;
};

HeadViews head_views(const Tensor& q, const Tensor& v, const AttentionParams& p) {
  DT_CHECK_EQ(q.rank(), 4);
  DT_CHECK_EQ(q.dim(2), p.heads);
  return {q.dim(1), q.dim(3), v.dim(3), p.heads * q.dim(3), p.heads * v.dim(3)};
}

// Scores of query rows [i0, i0 + bq) against key rows [j0, j0 + bk) into s (ld kBlock).
void scores(const float* q, const float* k, const HeadViews& h, const AttentionParams& p, int64_t i0, int64_t bq,
            int64_t j0, int64_t bk, float* s) {
  gemm('N', 'T', bq, bk, h.dk, p.scale, q + i0 * h.ld_k, h.ld_k, k + j0 * h.ld_k, h.ld_k, 0.0f, s, kBlock);
}

// How many of the block's bk keys query row i0 + i sees: all, or up to itself when causal.
int64_t visible(const AttentionParams& p, int64_t i0, int64_t i, int64_t j0, int64_t bk) {
  return p.causal ? std::clamp<int64_t>(i0 + i - j0 + 1, 0, bk) : bk;
}

void forward_head(const float* q, const float* k, const float* v, const HeadViews& h, const AttentionParams& p,
                  int64_t pair, float* out, float* lse) {
  std::vector<float> s(kBlock * kBlock), acc(static_cast<size_t>(kBlock * h.dv)), m(kBlock), l(kBlock), z(kBlock);
  for (int64_t i0 = 0; i0 < h.t; i0 += kBlock) {
    const int64_t bq = std::min(kBlock, h.t - i0);
    std::fill(m.begin(), m.end(), kNegInf);
    std::fill(l.begin(), l.end(), 0.0f);
    std::fill(acc.begin(), acc.end(), 0.0f);
    const int64_t key_end = p.causal ? i0 + bq : h.t;
    for (int64_t j0 = 0; j0 < key_end; j0 += kBlock) {
      const int64_t bk = std::min(kBlock, key_end - j0);
      scores(q, k, h, p, i0, bq, j0, bk, s.data());
      for (int64_t i = 0; i < bq; ++i) {
        float* row = s.data() + i * kBlock;
        const int64_t seen = visible(p, i0, i, j0, bk);
        const float top = row_max(row, seen, m[i]);
        const float rescale = m[i] == kNegInf ? 0.0f : std::exp(m[i] - top);
        const float sum = exp_shifted_sum(row, seen, top);
        std::fill(row + seen, row + bk, 0.0f);
        if (p.dropout > 0.0f) {
          dropout_row(p, static_cast<uint64_t>((pair * h.t + i0 + i) * h.t), j0, seen, z.data());
          for (int64_t j = 0; j < seen; ++j) row[j] *= z[j];
        }
        l[i] = l[i] * rescale + sum;
        m[i] = top;
        float* a = acc.data() + i * h.dv;
        for (int64_t d = 0; d < h.dv; ++d) a[d] *= rescale;
      }
      gemm('N', 'N', bq, h.dv, bk, 1.0f, s.data(), kBlock, v + j0 * h.ld_v, h.ld_v, 1.0f, acc.data(), h.dv);
    }
    for (int64_t i = 0; i < bq; ++i) {
      const float inv = 1.0f / l[i];
      float* o = out + (i0 + i) * h.ld_v;
      for (int64_t d = 0; d < h.dv; ++d) o[d] = acc[i * h.dv + d] * inv;
      lse[i0 + i] = m[i] + std::log(l[i]);
    }
  }
}

struct HeadGrads {
  float *dq, *dk, *dv;
};

void backward_head(const float* q, const float* k, const float* v, const float* out, const float* lse,
                   const float* dout, const HeadViews& h, const AttentionParams& p, int64_t pair, HeadGrads g) {
  std::vector<float> s(kBlock * kBlock), dp(kBlock * kBlock), delta(static_cast<size_t>(h.t));
  std::vector<float> z(p.dropout > 0.0f ? kBlock * kBlock : 0), dropped(z.size());
  for (int64_t i = 0; i < h.t; ++i) {
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t d = 0; d < h.dv; ++d) sum += dout[i * h.ld_v + d] * out[i * h.ld_v + d];
    delta[i] = sum;
    std::fill(g.dq + i * h.ld_k, g.dq + i * h.ld_k + h.dk, 0.0f);
    std::fill(g.dk + i * h.ld_k, g.dk + i * h.ld_k + h.dk, 0.0f);
    std::fill(g.dv + i * h.ld_v, g.dv + i * h.ld_v + h.dv, 0.0f);
  }
  for (int64_t j0 = 0; j0 < h.t; j0 += kBlock) {
    const int64_t bk = std::min(kBlock, h.t - j0);
    // Causal: the query blocks from the one holding row j0 on (blocks are aligned).
    for (int64_t i0 = p.causal ? j0 : 0; i0 < h.t; i0 += kBlock) {
      const int64_t bq = std::min(kBlock, h.t - i0);
      scores(q, k, h, p, i0, bq, j0, bk, s.data());
      for (int64_t i = 0; i < bq; ++i) {
        float* row = s.data() + i * kBlock;
        const int64_t seen = visible(p, i0, i, j0, bk);
        exp_shifted_sum(row, seen, lse[i0 + i]);
        std::fill(row + seen, row + bk, 0.0f);
      }
      const float* dout_i = dout + i0 * h.ld_v;
      const float* weights = s.data();  // what met v in the forward pass: P, or P Z with dropout
      if (p.dropout > 0.0f) {
        for (int64_t i = 0; i < bq; ++i) {
          float* zi = z.data() + i * kBlock;
          dropout_row(p, static_cast<uint64_t>((pair * h.t + i0 + i) * h.t), j0, bk, zi);
          for (int64_t j = 0; j < bk; ++j) dropped[i * kBlock + j] = s[i * kBlock + j] * zi[j];
        }
        weights = dropped.data();
      }
      gemm('T', 'N', bk, h.dv, bq, 1.0f, weights, kBlock, dout_i, h.ld_v, 1.0f, g.dv + j0 * h.ld_v, h.ld_v);
      gemm('N', 'T', bq, bk, h.dv, 1.0f, dout_i, h.ld_v, v + j0 * h.ld_v, h.ld_v, 0.0f, dp.data(), kBlock);
      if (p.dropout > 0.0f)
        for (int64_t i = 0; i < bq * kBlock; ++i) dp[i] *= z[i];
      for (int64_t i = 0; i < bq; ++i) score_grad(s.data() + i * kBlock, dp.data() + i * kBlock, bk, delta[i0 + i]);
      gemm('N', 'N', bq, h.dk, bk, p.scale, dp.data(), kBlock, k + j0 * h.ld_k, h.ld_k, 1.0f, g.dq + i0 * h.ld_k,
           h.ld_k);
      gemm('T', 'N', bk, h.dk, bq, p.scale, dp.data(), kBlock, q + i0 * h.ld_k, h.ld_k, 1.0f, g.dk + j0 * h.ld_k,
           h.ld_k);
    }
  }
}

void check_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                  const AttentionParams& p) {
  for (const Tensor* t : {&q, &k, &v, &out, &lse}) DT_CHECK(t->dtype() == DType::kF32, "attention runs in float32");
  DT_CHECK(k.shape() == q.shape(), "attention: k ", shape_str(k.shape()), " vs q ", shape_str(q.shape()));
  DT_CHECK(v.rank() == 4 && v.dim(0) == q.dim(0) && v.dim(1) == q.dim(1) && v.dim(2) == p.heads, "attention: v");
  DT_CHECK(out.shape() == v.shape(), "attention: out");
  DT_CHECK_EQ(lse.numel(), q.dim(0) * p.heads * q.dim(1));
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p, Tensor& out,
                       Tensor& lse) {
  const HeadViews h = head_views(q, v, p);
  check_shapes(q, k, v, out, lse, p);
  const int64_t n = q.dim(0), pairs = n * p.heads;
  const float *pq = q.data(), *pk = k.data(), *pv = v.data();
  float *po = out.data(), *pl = lse.data();
#pragma omp parallel for schedule(static)
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t b = pair / p.heads, head = pair % p.heads;
    const int64_t qk = b * h.t * h.ld_k + head * h.dk, vo = b * h.t * h.ld_v + head * h.dv;
    forward_head(pq + qk, pk + qk, pv + vo, h, p, pair, po + vo, pl + pair * h.t);
  }
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const AttentionParams& p, Tensor& dq, Tensor& dk, Tensor& dv) {
  const HeadViews h = head_views(q, v, p);
  check_shapes(q, k, v, out, lse, p);
  DT_CHECK(dout.shape() == out.shape() && dq.shape() == q.shape() && dk.shape() == k.shape() &&
               dv.shape() == v.shape(),
           "attention backward: gradient shapes");
  const int64_t n = q.dim(0), pairs = n * p.heads;
  const float *pq = q.data(), *pk = k.data(), *pv = v.data(), *po = out.data(), *pl = lse.data(),
              *pdo = dout.data();
  float *pdq = dq.data(), *pdk = dk.data(), *pdv = dv.data();
#pragma omp parallel for schedule(static)
  for (int64_t pair = 0; pair < pairs; ++pair) {
    const int64_t b = pair / p.heads, head = pair % p.heads;
    const int64_t qk = b * h.t * h.ld_k + head * h.dk, vo = b * h.t * h.ld_v + head * h.dv;
    backward_head(pq + qk, pk + qk, pv + vo, po + vo, pl + pair * h.t, pdo + vo, h, p, pair,
                  {pdq + qk, pdk + qk, pdv + vo});
  }
}

}  // namespace dtrain::kernels::cpu
