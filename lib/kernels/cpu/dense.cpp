// Dense layers on oneDNN's matmul primitive (the fastest f32 GEMM on these CPUs).
//
// The kernel is stored (in, out) row-major, Keras' layout. Transposed operands
// are expressed with the `ba` format tag, so no data is ever copied to transpose.
// The bias gradient is a oneDNN sum-reduction over the batch.
#include <functional>

#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"

namespace dtrain::kernels::cpu {
namespace {

struct MatmulPlan {
  memory::desc src, weights, bias, dst;
  dnnl::matmul prim;
};

// dst (m, n) = src (m, k) . weights (k, n) [+ bias (1, n)] [then post-op act].
// src_tag / weights_tag say how each operand is stored (ab: row-major, ba: transposed).
MatmulPlan make_matmul(int64_t m, int64_t k, int64_t n, Tag src_tag, Tag weights_tag, bool bias,
                       Activation act) {
  MatmulPlan plan;
  plan.src = memory::desc({m, k}, kF32, src_tag);
  plan.weights = memory::desc({k, n}, kF32, weights_tag);
  plan.bias = memory::desc({1, n}, kF32, Tag::ab);
  plan.dst = memory::desc({m, n}, kF32, Tag::ab);
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
                        Activation act) {
  const std::string key = str("matmul:", m, ",", k, ",", n, ",", static_cast<int>(src_tag), ",",
                              static_cast<int>(weights_tag), ",", bias, ",",
                              static_cast<int>(act));
  return cached<MatmulPlan>(
      key, [&] { return make_matmul(m, k, n, src_tag, weights_tag, bias, act); });
}

void run_matmul(MatmulPlan& plan, const Tensor& src, const Tensor& weights, const Tensor* bias,
                Tensor& dst) {
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, as_memory(plan.src, src)},
                                          {DNNL_ARG_WEIGHTS, as_memory(plan.weights, weights)},
                                          {DNNL_ARG_DST, as_memory(plan.dst, dst)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, as_memory(plan.bias, *bias));
  execute(plan.prim, args);
}

struct ReducePlan {
  memory::desc src, dst;
  dnnl::reduction prim;
};

// dst (1, n) = sum over rows of src (m, n)
void sum_rows(const Tensor& src, Tensor& dst) {
  const int64_t m = src.dim(0), n = src.dim(1);
  auto& plan = cached<ReducePlan>(str("sum_rows:", m, ",", n), [&] {
    ReducePlan p;
    p.src = memory::desc({m, n}, kF32, Tag::ab);
    p.dst = memory::desc({1, n}, kF32, Tag::ab);
    p.prim = dnnl::reduction(dnnl::reduction::primitive_desc(
        dnnl::reduction::desc(dnnl::algorithm::reduction_sum, p.src, p.dst, 0.0f, 0.0f), engine()));
    return p;
  });
  execute(plan.prim, {{DNNL_ARG_SRC, as_memory(plan.src, src)}, {DNNL_ARG_DST, as_memory(plan.dst, dst)}});
}

}  // namespace

void dense_forward(const Tensor& x, const Tensor& w, const Tensor* b, Activation act, Tensor& y) {
  DT_CHECK(act != Activation::kSoftmax, "softmax is applied after a linear Dense");
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(1);
  DT_CHECK_EQ(w.dim(0), in);
  DT_CHECK(y.shape() == Shape({n, out}), "dense output ", shape_str(y.shape()));
  auto& plan = matmul_plan(n, in, out, Tag::ab, Tag::ab, b != nullptr, act);
  run_matmul(plan, x, w, b, y);
}

void dense_backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) {
  const int64_t n = dy.dim(0), out = dy.dim(1), in = w.dim(0);
  DT_CHECK_EQ(w.dim(1), out);
  DT_CHECK(dx.shape() == Shape({n, in}), "dense dx ", shape_str(dx.shape()));
  // dx (n, in) = dy (n, out) . w^T (out, in); w^T is w read with the `ba` tag.
  auto& plan = matmul_plan(n, out, in, Tag::ab, Tag::ba, false, Activation::kLinear);
  run_matmul(plan, dy, w, nullptr, dx);
}

void dense_backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) {
  const int64_t n = x.dim(0), in = x.dim(1), out = dy.dim(1);
  DT_CHECK_EQ(dy.dim(0), n);
  DT_CHECK(dw.shape() == Shape({in, out}), "dense dw ", shape_str(dw.shape()));
  // dw (in, out) = x^T (in, n) . dy (n, out); x^T is x read with the `ba` tag.
  auto& plan = matmul_plan(in, n, out, Tag::ba, Tag::ab, false, Activation::kLinear);
  run_matmul(plan, x, dy, nullptr, dw);
  if (db) {
    Tensor db2 = db->reshaped({1, out});
    sum_rows(dy, db2);
  }
}

}  // namespace dtrain::kernels::cpu
