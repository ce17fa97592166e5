// Dense layers on oneDNN's matmul primitive (the fastest f32 GEMM on these CPUs).
//
// The kernel is stored (in, out) row-major, Keras' layout. Transposed operands
// are expressed with the `ba` format tag, so no data is ever copied to transpose.
// The bias gradient is an own column-sum loop (see sum_rows). Each operand may be
// float32 or bfloat16 (mixed precision: bf16 activations and weight copies, the
// weight gradient in float32); the bias stays float32.
#include <omp.h>

#include <algorithm>
#include <functional>

#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"
#include "tensor/bfloat16.h"

namespace dtrain::kernels::cpu {
namespace {

struct MatmulPlan {
  memory::desc src, weights, bias, dst;
  dnnl::matmul prim;
  bool emulated = false;  // float32 in place of bfloat16 (onednn.h)
};

// dst (m, n) = src (m, k) . weights (k, n) [+ bias (1, n)] [then post-op act].
// src_tag / weights_tag say how each operand is stored (ab: row-major, ba: transposed).
MatmulPlan make_matmul(int64_t m, int64_t k, int64_t n, Tag src_tag, Tag weights_tag, bool bias,
                       Activation act, const Tensor& src, const Tensor& weights, const Tensor& dst,
                       bool emulated) {
  MatmulPlan plan;
  plan.src = memory::desc({m, k}, compute_type(src, emulated), src_tag);
  plan.weights = memory::desc({k, n}, compute_type(weights, emulated), weights_tag);
  plan.bias = memory::desc({1, n}, kF32, Tag::ab);
  plan.dst = memory::desc({m, n}, compute_type(dst, emulated), Tag::ab);
  dnnl::primitive_attr attr;
  if (act != Activation::kLinear) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, eltwise_algorithm(act), 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  const auto desc = bias ? dnnl::matmul::desc(plan.src, plan.weights, plan.bias, plan.dst)
                         : dnnl::matmul::desc(plan.src, plan.weights, plan.dst);
  plan.prim = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine()));
  return plan;
}

MatmulPlan& matmul_plan(int64_t m, int64_t k, int64_t n, Tag src_tag, Tag weights_tag, bool bias,
                        Activation act, const Tensor& src, const Tensor& weights, const Tensor& dst) {
  const std::string key = str("matmul:", m, ",", k, ",", n, ",", static_cast<int>(src_tag), ",",
                              static_cast<int>(weights_tag), ",", bias, ",",
                              static_cast<int>(act), ",", dtype_key({&src, &weights, &dst}));
  return cached<MatmulPlan>(key, [&] {
    const Describe describe = [&] {
      return str("a Dense matmul (", m, "x", k, ")x(", k, "x", n, ")", bias ? " + bias" : "", " in ",
                 dtype_key({&src, &weights, &dst}), " (src, weights, dst)");
    };
    return make_plan<MatmulPlan>(any_bf16({&src, &weights, &dst}), describe, [&](bool emulated) {
      return make_matmul(m, k, n, src_tag, weights_tag, bias, act, src, weights, dst, emulated);
    });
  });
}

void run_matmul(MatmulPlan& plan, const Tensor& src, const Tensor& weights, const Tensor* bias,
                Tensor& dst) {
  Staging staging(plan.emulated);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, staging.in(plan.src, src)},
                                          {DNNL_ARG_WEIGHTS, staging.in(plan.weights, weights)},
                                          {DNNL_ARG_DST, staging.out(plan.dst, dst)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, as_memory(plan.bias, *bias));
  execute(plan.prim, args, staging);
}

// dst (n) = sum over rows of src (m, n): the bias gradient. An own loop because
// oneDNN 2.6's reduction picked its reference kernel (ref:any, ~0.9 ms for 128x256).
// Threads split the columns into cache-line-aligned blocks and each column is
// summed in row order, so the result does not depend on the thread count.
template <class T>
void sum_rows(const T* in, int64_t m, int64_t n, float* out) {
  constexpr int64_t kLine = 16;  // floats per 64-byte line: no two threads share one in `out`
#pragma omp parallel if (m * n > 65536)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t lines = (n + kLine - 1) / kLine;
    const int64_t j0 = std::min(n, lines * t / threads * kLine);
    const int64_t j1 = std::min(n, lines * (t + 1) / threads * kLine);
    if (j0 < j1) {
      std::fill(out + j0, out + j1, 0.0f);
      for (int64_t i = 0; i < m; ++i) {
        const T* row = in + i * n;
        for (int64_t j = j0; j < j1; ++j) out[j] += value_of(row[j]);
      }
    }
  }
}

void sum_rows(const Tensor& src, Tensor& dst) {
  const int64_t m = src.dim(0), n = src.dim(1);
  DT_CHECK_EQ(dst.numel(), n);
  if (src.dtype() == DType::kBF16) return sum_rows(src.data_bf16(), m, n, dst.data());
  sum_rows(src.data(), m, n, dst.data());
}

}  // namespace

void dense_forward(const Tensor& x, const Tensor& w, const Tensor* b, Activation act, Tensor& y) {
  DT_CHECK(act != Activation::kSoftmax, "softmax is applied after a linear Dense");
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(1);
  DT_CHECK_EQ(w.dim(0), in);
  DT_CHECK(y.shape() == Shape({n, out}), "dense output ", shape_str(y.shape()));
  auto& plan = matmul_plan(n, in, out, Tag::ab, Tag::ab, b != nullptr, act, x, w, y);
  run_matmul(plan, x, w, b, y);
}

void dense_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  const int64_t n = dy.dim(0), out = dy.dim(1), in = w.dim(0);
  DT_CHECK_EQ(w.dim(1), out);
  DT_CHECK(dx.shape() == Shape({n, in}), "dense dx ", shape_str(dx.shape()));
  // dx (n, in) = dy (n, out) . w^T (out, in); w^T is w read with the `ba` tag.
  auto& plan = matmul_plan(n, out, in, Tag::ab, Tag::ba, false, Activation::kLinear, dy, w, dx);
  run_matmul(plan, dy, w, nullptr, dx);
}

void dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) {
  const int64_t n = x.dim(0), in = x.dim(1), out = dy.dim(1);
  DT_CHECK_EQ(dy.dim(0), n);
  DT_CHECK(dw.shape() == Shape({in, out}), "dense dw ", shape_str(dw.shape()));
  // dw (in, out) = x^T (in, n) . dy (n, out); x^T is x read with the `ba` tag.
  auto& plan = matmul_plan(in, n, out, Tag::ba, Tag::ab, false, Activation::kLinear, x, dy, dw);
  run_matmul(plan, x, dy, nullptr, dw);
  if (db) {
    sum_rows(dy, *db);
  }
}

}  // namespace dtrain::kernels::cpu
