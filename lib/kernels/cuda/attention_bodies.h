// The own kernels' bodies around attention's cuBLASLt products (attention.cpp):
// moving q, k, v and the gradients between the layers' (N, T, H, D) layout and
// the products' (N*H, T, D) one, and the row and element steps between the
// products on the (N*H, T, T) scores. bodies.h's rules (index i's work in
// operator()(i), every output element written by one index; checked on the
// host against the CPU backend). float32.
//
// Score matrix b = sample * heads + head holds S[i][j] = scale * q_i . k_j at
// b * T * T + i * T + j, which is also the dropout index AttentionShape::keep
// uses: ((sample * heads + head) * T + i) * T + j.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/host_device.h"
#include "kernels/cuda/sequence_bodies.h"

namespace dtrain::kernels::cuda {

// (N, T, H, D) <-> (N, H, T, D), one element per index of the (N, H, T, D) side.
struct HeadsTransposeBody {
  const float* in;
  int64_t t, heads, d;
  bool to_heads_major;  // true: in is (N, T, H, D), out (N, H, T, D); false: the other way
  float* out;
  DT_HOST_DEVICE void operator()(int64_t i) const {
    const int64_t c = i % d, row = (i / d) % t, h = (i / (d * t)) % heads, n = i / (d * t * heads);
    const int64_t layer_index = ((n * t + row) * heads + h) * d + c;
    if (to_heads_major)
      out[i] = in[layer_index];
    else
      out[layer_index] = in[i];
  }
};

// Forward, a row (b, i) per index: the scores become the weights the values are
// summed with, in place: P[i][j] = exp(S[i][j] - lse_i) * keep(i, j) for the keys
// row i sees, 0 for the others; lse_i (the undropped normaliser's log) is kept.
struct AttentionSoftmaxRowsBody {
  float* scores;  // (N*H, T, T)
  AttentionShape s;
  float* lse;     // (N*H*T): the (N, H, T) of attention_forward
  DT_HOST_DEVICE void operator()(int64_t row) const {
    const int64_t i = row % s.t, end = s.key_end(i);
    float* p = scores + row * s.t;
    float m = -INFINITY;
    for (int64_t j = 0; j < end; ++j) m = p[j] > m ? p[j] : m;
    float l = 0.0f;
    for (int64_t j = 0; j < end; ++j) l += ::expf(p[j] - m);
    const float log_l = m + ::logf(l);
    for (int64_t j = 0; j < end; ++j) p[j] = ::expf(p[j] - log_l) * s.keep(row, j);
    for (int64_t j = end; j < s.t; ++j) p[j] = 0.0f;
    lse[row] = log_l;
  }
};

// Backward, an element (b, i, j) per index: the forward's weights again from the
// recomputed scores and lse: P (undropped, in place of the scores) and the
// dropped ones the values were summed with (dropped, for dv).
struct AttentionProbabilitiesBody {
  float* scores;  // in: S; out: P
  const float* lse;
  AttentionShape s;
  float* dropped;  // P * keep
  DT_HOST_DEVICE void operator()(int64_t e) const {
    const int64_t row = e / s.t, j = e % s.t, i = row % s.t;
    const float p = j < s.key_end(i) ? ::expf(scores[e] - lse[row]) : 0.0f;
    scores[e] = p;
    dropped[e] = p * s.keep(row, j);
  }
};

// Backward, an element per index: the scores' gradient (without the scale, which
// the products for dq and dk apply) from P and the dropped weights' gradient
// dP~ = dout . v: dS = P * (dP~ * keep - delta_i), in place of P.
struct AttentionScoreGradBody {
  float* probabilities;  // in: P; out: dS
  const float* dropped_grad;
  const float* delta;  // dout_i . out_i per row (AttentionDeltaBody)
  AttentionShape s;
  DT_HOST_DEVICE void operator()(int64_t e) const {
    const int64_t row = e / s.t, j = e % s.t;
    probabilities[e] = probabilities[e] * (dropped_grad[e] * s.keep(row, j) - delta[row]);
  }
};

}  // namespace dtrain::kernels::cuda
