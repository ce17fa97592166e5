// Attention on the GPU (ops.h's attention_forward / attention_backward), two
// ways (kernels::gpu_attention() chooses, device.h):
//   matmul  attention_steps.h: q, k, v move to (N*H, T, D); the scores
//           S = scale * Q K^T of every head come from one cuBLASLt strided
//           batched product into an (N*H, T, T) scratch; own kernels turn them
//           into weights (softmax with the causal mask and dropout,
//           attention_bodies.h); one more product sums the values. The backward
//           recomputes S and P from lse and runs four products (dv, dP~, dq, dk)
//           with the element kernels between them: two (N*H, T, T) scratches.
//   rows    sequence_bodies.h's row per query: an online softmax, no (T, T)
//           matrix kept, heads of up to kMaxHeadDim values; slow.
// float32, like the CPU's blocked kernels, whose outputs both match.
#include <memory>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "kernels/cuda/allocator.h"
#include "kernels/cuda/attention_steps.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/elements.h"
#include "kernels/cuda/launchers.h"
#include "kernels/cuda/matmul.h"

namespace dtrain::kernels::cuda {
namespace {

AttentionShape attention_shape(const Tensor& q, const Tensor& v, const AttentionParams& p) {
  DT_CHECK(q.rank() == 4 && v.rank() == 4 && q.dim(2) == p.heads, "attention shapes");
  return {q.dim(1), p.heads, q.dim(3), v.dim(3), p.scale, p.causal, p.dropout, p.seed};
}

// Whether this call runs on the cuBLASLt products (else the row kernels).
bool use_matmul(const Tensor& q, const AttentionShape& s) {
  const GpuAttention choice = gpu_attention();
  const auto heads = static_cast<size_t>(q.dim(0) * s.heads), t = static_cast<size_t>(s.t);
  const bool fits = 2 * heads * t * t * sizeof(float) <= kGpuAttentionScoresLimit;
  const bool row_kernels_can = s.dk <= kMaxHeadDim && s.dv <= kMaxHeadDim;  // (their per-row accumulators)
  return choice == GpuAttention::kMatmul || (choice == GpuAttention::kAuto && fits) || !row_kernels_can;
}

// attention_steps.h's Ops on the GPU: scratch from the caching allocator
// (returned when the call ends, ordered by the compute stream), cuBLASLt's
// products and the own kernels.
class GpuOps {
 public:
  float* scratch(int64_t floats) {
    buffers_.push_back(std::make_unique<Scratch>(static_cast<size_t>(floats) * sizeof(float)));
    return buffers_.back()->floats();
  }
  void matmul(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t batch, float alpha, const float* a,
              const float* b, float* c) {
    batched_matmul(trans_a, trans_b, m, n, k, batch, alpha, a, b, c);
  }
  template <class Body>
  void run(const Body& body, int64_t n) {
    launch(body, n);
  }

 private:
  std::vector<std::unique_ptr<Scratch>> buffers_;
};

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p, Tensor& out,
                       Tensor& lse) {
  require_f32("attention_forward", {&q, &k, &v, &out, &lse});
  const AttentionShape s = attention_shape(q, v, p);
  DT_CHECK(k.shape() == q.shape() && out.shape() == v.shape() && lse.numel() == q.dim(0) * p.heads * s.t,
           "attention_forward shapes");
  if (q.numel() == 0) return;
  if (use_matmul(q, s)) {
    GpuOps ops;
    return attention_forward_steps(ops, q.data(), k.data(), v.data(), q.dim(0), s, out.data(), lse.data());
  }
  launch(AttentionForwardRowsBody{q.data(), k.data(), v.data(), s, out.data(), lse.data()}, lse.numel());
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, const AttentionParams& p, Tensor& dq, Tensor& dk, Tensor& dv) {
  require_f32("attention_backward", {&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv});
  const AttentionShape s = attention_shape(q, v, p);
  DT_CHECK(dout.shape() == out.shape() && dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape(),
           "attention_backward shapes");
  if (q.numel() == 0) return;
  if (use_matmul(q, s)) {
    GpuOps ops;
    return attention_backward_steps(ops, q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(), q.dim(0),
                                    s, dq.data(), dk.data(), dv.data());
  }
  const int64_t rows = lse.numel();
  Scratch delta(static_cast<size_t>(rows) * sizeof(float));
  launch(AttentionDeltaBody{out.data(), dout.data(), s, delta.floats()}, rows);
  launch(AttentionQueryGradBody{q.data(), k.data(), v.data(), lse.data(), dout.data(), delta.floats(), s, dq.data()},
         rows);
  launch(AttentionKeyValueGradBody{q.data(), k.data(), v.data(), lse.data(), dout.data(), delta.floats(), s, dk.data(),
                                   dv.data()},
         rows);
}

}  // namespace dtrain::kernels::cuda
