// The bodies of the transformer layers' own CUDA kernels (bodies.h's rules: one
// struct per kernel, operator()(i) does index i's work, no shared memory, no
// atomics, every output element written by one index; the same bodies run on
// the host in tests against the CPU backend). float32.
//
// Attention here is a row per index: index (sample, head, row) walks the keys
// it sees with an online softmax (forward), or sums its own gradient row
// (backward: one body for dq's rows, one for dk's and dv's), recomputing the
// probabilities from the forward's log-sum-exp. Simple and exact; the CPU's
// blocked kernels (cpu/attention.cpp) are the fast path.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/host_device.h"
#include "core/rng.h"
#include "kernels/element_math.h"

namespace dtrain::kernels::cuda {

// The largest head size the attention bodies take (their per-row accumulators).
constexpr int64_t kMaxHeadDim = 256;

// dx = dy * act'(x), from the input x (gelu).
struct ActivationGradFromInputBody {
  const float* x;
  const float* dy;
  float* dx;
  Activation act;
  DT_HOST_DEVICE void operator()(int64_t i) const { dx[i] = math::activation_grad_from_input(act, x[i], dy[i]); }
};

// Layer normalization of row r of d values (element_math.h's layer_norm_row).
struct LayerNormRowsBody {
  const float* x;
  const float* gamma;
  const float* beta;
  float epsilon;
  int64_t d;
  float* y;
  float* mean;
  float* rstd;
  DT_HOST_DEVICE void operator()(int64_t r) const {
    math::layer_norm_row(x + r * d, gamma, beta, epsilon, d, y + r * d, mean + r, rstd + r);
  }
};

// dx of row r (element_math.h's layer_norm_grad_row).
struct LayerNormBackwardRowsBody {
  const float* x;
  const float* dy;
  const float* gamma;
  const float* mean;
  const float* rstd;
  int64_t d;
  float* dx;
  DT_HOST_DEVICE void operator()(int64_t r) const {
    math::layer_norm_grad_row(x + r * d, dy + r * d, gamma, mean[r], rstd[r], d, dx + r * d);
  }
};

// dy[r][c] * h[r][c], h the normalised input: dgamma's terms, for column_sums.
struct LayerNormGammaValue {
  const float* dy;
  const float* x;
  const float* mean;
  const float* rstd;
  int64_t cols;
  DT_HOST_DEVICE float operator()(int64_t r, int64_t c) const {
    return dy[r * cols + c] * (x[r * cols + c] - mean[r]) * rstd[r];
  }
};

// y[r][j] = table[ids[r]][j]; index = r * d + j. The ids were checked on the host.
struct EmbeddingGatherBody {
  const float* ids;
  const float* table;
  int64_t d;
  float* y;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    y[i] = table[static_cast<int64_t>(ids[i / d]) * d + i % d];
  }
};

// dtable[v][j] = sum of dy[r][j] over the rows r whose id is v, in row order;
// index = v * d + j (a gather per table element: no atomics).
struct EmbeddingScatterBody {
  const float* ids;
  const float* dy;
  int64_t rows, d;
  float* dtable;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t v = i / d, j = i % d;
    float sum = 0.0f;
    for (int64_t r = 0; r < rows; ++r)
      if (static_cast<int64_t>(ids[r]) == v) sum += dy[r * d + j];
    dtable[i] = sum;
  }
};

// The shapes of attention's tensors: q, k (N, T, H, dk), v, out (N, T, H, dv),
// lse (N, H, T). Index (sample, head, row) = (b * heads + h) * t + row.
struct AttentionShape {
  int64_t t, heads, dk, dv;
  float scale;
  bool causal;
  float dropout;  // on the weights, AttentionParams' (0: none)
  uint64_t seed;
  DT_HOST_DEVICE int64_t qk_row(int64_t index, int64_t row) const {
    const int64_t b = index / (heads * t), h = (index / t) % heads;
    return ((b * t + row) * heads + h) * dk;
  }
  DT_HOST_DEVICE int64_t v_row(int64_t index, int64_t row) const {
    const int64_t b = index / (heads * t), h = (index / t) % heads;
    return ((b * t + row) * heads + h) * dv;
  }
  // The keys row i sees: [0, i] when causal, else all.
  DT_HOST_DEVICE int64_t key_end(int64_t i) const { return causal ? i + 1 : t; }
  // The dropout multiplier of weight (index's row, key j): the CPU backend's.
  DT_HOST_DEVICE float keep(int64_t index, int64_t j) const {
    return dropout > 0.0f ? dropout_multiplier(seed, static_cast<uint64_t>(index * t + j), dropout) : 1.0f;
  }
  DT_HOST_DEVICE float score(const float* q, const float* k, int64_t index, int64_t i, int64_t j) const {
    const float* a = q + qk_row(index, i);
    const float* b = k + qk_row(index, j);
    float s = 0.0f;
    for (int64_t c = 0; c < dk; ++c) s += a[c] * b[c];
    return s * scale;
  }
};

// out's row and lse of index (b, h, i), online softmax over its keys.
struct AttentionForwardRowsBody {
  const float* q;
  const float* k;
  const float* v;
  AttentionShape s;
  float* out;
  float* lse;
  DT_HOST_DEVICE void operator()(int64_t index) const {
    const int64_t i = index % s.t;
    float acc[kMaxHeadDim];
    for (int64_t c = 0; c < s.dv; ++c) acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = 0; j < s.key_end(i); ++j) {
      const float x = s.score(q, k, index, i, j);
      const float top = x > m ? x : m;
      const float rescale = ::expf(m - top), p = ::expf(x - top);
      l = l * rescale + p;  // the undropped normaliser
      const float kept = p * s.keep(index, j);
      const float* vj = v + s.v_row(index, j);
      for (int64_t c = 0; c < s.dv; ++c) acc[c] = acc[c] * rescale + kept * vj[c];
      m = top;
    }
    float* o = out + s.v_row(index, i);
    for (int64_t c = 0; c < s.dv; ++c) o[c] = acc[c] / l;
    lse[index] = m + ::logf(l);
  }
};

// delta[index] = dout_i . out_i, for the two gradient bodies.
struct AttentionDeltaBody {
  const float* out;
  const float* dout;
  AttentionShape s;
  float* delta;
  DT_HOST_DEVICE void operator()(int64_t index) const {
    const int64_t row = s.v_row(index, index % s.t);
    float sum = 0.0f;
    for (int64_t c = 0; c < s.dv; ++c) sum += dout[row + c] * out[row + c];
    delta[index] = sum;
  }
};

// dq's row i: scale * sum_j P_ij (dout_i . v_j - delta_i) k_j.
struct AttentionQueryGradBody {
  const float* q;
  const float* k;
  const float* v;
  const float* lse;
  const float* dout;
  const float* delta;
  AttentionShape s;
  float* dq;
  DT_HOST_DEVICE void operator()(int64_t index) const {
    const int64_t i = index % s.t;
    float acc[kMaxHeadDim];
    for (int64_t c = 0; c < s.dk; ++c) acc[c] = 0.0f;
    const float* g = dout + s.v_row(index, i);
    for (int64_t j = 0; j < s.key_end(i); ++j) {
      const float p = ::expf(s.score(q, k, index, i, j) - lse[index]);
      const float* vj = v + s.v_row(index, j);
      float dp = 0.0f;
      for (int64_t c = 0; c < s.dv; ++c) dp += g[c] * vj[c];
      const float ds = p * (dp * s.keep(index, j) - delta[index]);
      const float* kj = k + s.qk_row(index, j);
      for (int64_t c = 0; c < s.dk; ++c) acc[c] += ds * kj[c];
    }
    float* out_row = dq + s.qk_row(index, i);
    for (int64_t c = 0; c < s.dk; ++c) out_row[c] = acc[c] * s.scale;
  }
};

// dk's and dv's row j: over the queries i that see key j,
// dv_j = sum_i P_ij dout_i, dk_j = scale * sum_i P_ij (dout_i . v_j - delta_i) q_i.
struct AttentionKeyValueGradBody {
  const float* q;
  const float* k;
  const float* v;
  const float* lse;
  const float* dout;
  const float* delta;
  AttentionShape s;
  float* dk;
  float* dv;
  DT_HOST_DEVICE void operator()(int64_t index) const {
    const int64_t j = index % s.t, first = index - j;  // index of row 0 of this (sample, head)
    float gk[kMaxHeadDim], gv[kMaxHeadDim];
    for (int64_t c = 0; c < s.dk; ++c) gk[c] = 0.0f;
    for (int64_t c = 0; c < s.dv; ++c) gv[c] = 0.0f;
    const float* vj = v + s.v_row(index, j);
    for (int64_t i = s.causal ? j : 0; i < s.t; ++i) {
      const float p = ::expf(s.score(q, k, index, i, j) - lse[first + i]);
      const float z = s.keep(first + i, j);
      const float* g = dout + s.v_row(index, i);
      float dp = 0.0f;
      for (int64_t c = 0; c < s.dv; ++c) {
        gv[c] += p * z * g[c];
        dp += g[c] * vj[c];
      }
      const float ds = p * (dp * z - delta[first + i]);
      const float* qi = q + s.qk_row(index, i);
      for (int64_t c = 0; c < s.dk; ++c) gk[c] += ds * qi[c];
    }
    for (int64_t c = 0; c < s.dk; ++c) dk[s.qk_row(index, j) + c] = gk[c] * s.scale;
    for (int64_t c = 0; c < s.dv; ++c) dv[s.v_row(index, j) + c] = gv[c];
  }
};

}  // namespace dtrain::kernels::cuda
