// Attention as products of many small matrices (the CUDA backend's "matmul"
// kernels, attention.cpp): the order of the steps, written once over an `Ops`
// that supplies memory, products and kernel launches, so the same code runs on
// the GPU (cuBLASLt and the own kernels) and on the host in tests (loops and
// run_on_host) against the CPU backend.
//
// Ops provides:
//   float* scratch(int64_t floats)        memory that lives as long as the Ops
//   void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
//               int64_t batch, float alpha, const float* a, const float* b, float* c)
//                                          matmul.h's batched_matmul
//   template <class Body> void run(const Body& body, int64_t n)
//                                          body(i) for i in [0, n)
//
// Layouts: q, k (N, T, H, Dk), v, out (N, T, H, Dv), lse (N, H, T) as in ops.h.
// Each head's row-major (T, D) matrix X is the column-major (D, T) matrix X_c,
// and the row-major (T, T) scores S (queries, keys) the column-major S_c (keys,
// queries): S_c = scale * K_c^T Q_c, O_c = V_c P_c, and so on below.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/attention_bodies.h"

namespace dtrain::kernels::cuda {

// x (N, T, H, D) as (N*H, T, D) in new scratch memory.
template <class Ops>
float* heads_major(Ops& ops, const float* x, int64_t n, const AttentionShape& s, int64_t d) {
  const int64_t size = n * s.t * s.heads * d;
  float* out = ops.scratch(size);
  ops.run(HeadsTransposeBody{x, s.t, s.heads, d, true, out}, size);
  return out;
}

// `x` (N*H, T, D) into `out` (N, T, H, D).
template <class Ops>
void to_layer_layout(Ops& ops, const float* x, int64_t n, const AttentionShape& s, int64_t d, float* out) {
  ops.run(HeadsTransposeBody{x, s.t, s.heads, d, false, out}, n * s.t * s.heads * d);
}

// out and lse from q, k, v: n samples.
template <class Ops>
void attention_forward_steps(Ops& ops, const float* q, const float* k, const float* v, int64_t n,
                             const AttentionShape& s, float* out, float* lse) {
  const int64_t b = n * s.heads, t = s.t;
  const float* qh = heads_major(ops, q, n, s, s.dk);
  const float* kh = heads_major(ops, k, n, s, s.dk);
  const float* vh = heads_major(ops, v, n, s, s.dv);
  float* scores = ops.scratch(b * t * t);
  ops.matmul(true, false, t, t, s.dk, b, s.scale, kh, qh, scores);  // S_c = scale K_c^T Q_c
  ops.run(AttentionSoftmaxRowsBody{scores, s, lse}, b * t);          // P (dropped), lse
  float* o = ops.scratch(b * t * s.dv);
  ops.matmul(false, false, s.dv, t, t, b, 1.0f, vh, scores, o);      // O_c = V_c P_c
  to_layer_layout(ops, o, n, s, s.dv, out);
}

// dq, dk, dv from the forward's inputs, out, lse and dout.
template <class Ops>
void attention_backward_steps(Ops& ops, const float* q, const float* k, const float* v, const float* out,
                              const float* lse, const float* dout, int64_t n, const AttentionShape& s, float* dq,
                              float* dk, float* dv) {
  const int64_t b = n * s.heads, t = s.t;
  float* delta = ops.scratch(b * t);
  ops.run(AttentionDeltaBody{out, dout, s, delta}, b * t);
  const float* qh = heads_major(ops, q, n, s, s.dk);
  const float* kh = heads_major(ops, k, n, s, s.dk);
  const float* vh = heads_major(ops, v, n, s, s.dv);
  const float* gh = heads_major(ops, dout, n, s, s.dv);
  float* p = ops.scratch(b * t * t);
  float* dropped = ops.scratch(b * t * t);
  float* grad = ops.scratch(b * t * std::max(s.dk, s.dv));
  ops.matmul(true, false, t, t, s.dk, b, s.scale, kh, qh, p);            // S_c again
  ops.run(AttentionProbabilitiesBody{p, lse, s, dropped}, b * t * t);     // P, and P~ = P * keep
  ops.matmul(false, true, s.dv, t, t, b, 1.0f, gh, dropped, grad);       // dV_c = dO_c P~_c^T
  to_layer_layout(ops, grad, n, s, s.dv, dv);
  ops.matmul(true, false, t, t, s.dv, b, 1.0f, vh, gh, dropped);         // dP~_c = V_c^T dO_c
  ops.run(AttentionScoreGradBody{p, dropped, delta, s}, b * t * t);      // dS (without the scale)
  ops.matmul(false, false, s.dk, t, t, b, s.scale, kh, p, grad);         // dQ_c = scale K_c dS_c
  to_layer_layout(ops, grad, n, s, s.dk, dq);
  ops.matmul(false, true, s.dk, t, t, b, s.scale, qh, p, grad);          // dK_c = scale Q_c dS_c^T
  to_layer_layout(ops, grad, n, s, s.dk, dk);
}

}  // namespace dtrain::kernels::cuda
