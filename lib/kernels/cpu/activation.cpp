// Activations on oneDNN: eltwise (relu, sigmoid, tanh) and softmax over the last
// axis, forward and backward. Backward passes read the forward output (dst), so
// layers keep only their outputs. Tensors of any rank are viewed as flat (eltwise)
// or as (rows, last-axis) (softmax). Element-wise activations run in the
// tensors' dtype (float32 or bfloat16); softmax is float32, as in Keras' mixed
// precision.
#include <cstring>

#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"

namespace dtrain::kernels::cpu {
namespace {

using dnnl::memory;

struct EltwisePlan {
  memory::desc md;
  dnnl::eltwise_forward forward;
  dnnl::eltwise_backward backward;
};

EltwisePlan& eltwise_plan(Activation act, int64_t n, DType dtype) {
  return cached<EltwisePlan>(str("eltwise:", static_cast<int>(act), ",", n, ",", dtype_name(dtype)), [&] {
    EltwisePlan plan;
    plan.md = memory::desc({n}, dnnl_type(dtype), Tag::a);
    const auto alg = eltwise_algorithm_dst(act);
    const auto fwd_pd = dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, plan.md, 0.0f, 0.0f),
        engine());
    plan.forward = dnnl::eltwise_forward(fwd_pd);
    plan.backward = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
        dnnl::eltwise_backward::desc(alg, plan.md, plan.md, 0.0f, 0.0f), engine(), fwd_pd));
    return plan;
  });
}

struct SoftmaxPlan {
  memory::desc md;
  dnnl::softmax_forward forward;
  dnnl::softmax_backward backward;
};

SoftmaxPlan& softmax_plan(int64_t rows, int64_t cols) {
  return cached<SoftmaxPlan>(str("softmax:", rows, ",", cols), [&] {
    SoftmaxPlan plan;
    plan.md = memory::desc({rows, cols}, kF32, Tag::ab);
    const auto fwd_pd = dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_training, plan.md, 1), engine());
    plan.forward = dnnl::softmax_forward(fwd_pd);
    plan.backward = dnnl::softmax_backward(dnnl::softmax_backward::primitive_desc(
        dnnl::softmax_backward::desc(plan.md, plan.md, 1), engine(), fwd_pd));
    return plan;
  });
}

void copy_if_distinct(const Tensor& from, Tensor& to) {
  if (from.raw() != to.raw()) to.copy_from(from);
}

}  // namespace

void activation_forward(Activation act, const Tensor& x, Tensor& y) {
  DT_CHECK_EQ(x.numel(), y.numel());
  if (act == Activation::kLinear) return copy_if_distinct(x, y);
  if (act == Activation::kSoftmax) {
    DT_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32, "softmax runs in float32");
    const int64_t cols = x.dim(-1), rows = x.numel() / cols;
    auto& plan = softmax_plan(rows, cols);
    return execute(plan.forward, {{DNNL_ARG_SRC, as_memory(plan.md, x)}, {DNNL_ARG_DST, as_memory(plan.md, y)}});
  }
  DT_CHECK(x.dtype() == y.dtype(), "activation between dtypes");
  auto& plan = eltwise_plan(act, x.numel(), x.dtype());
  execute(plan.forward, {{DNNL_ARG_SRC, as_memory(plan.md, x)}, {DNNL_ARG_DST, as_memory(plan.md, y)}});
}

void activation_backward(Activation act, const Tensor& y, const Tensor& dy, Tensor& dx) {
  DT_CHECK_EQ(y.numel(), dy.numel());
  DT_CHECK_EQ(y.numel(), dx.numel());
  if (act == Activation::kLinear) return copy_if_distinct(dy, dx);
  if (act == Activation::kSoftmax) {
    DT_CHECK(y.dtype() == DType::kF32 && dx.dtype() == DType::kF32, "softmax runs in float32");
    const int64_t cols = y.dim(-1), rows = y.numel() / cols;
    auto& plan = softmax_plan(rows, cols);
    return execute(plan.backward, {{DNNL_ARG_DST, as_memory(plan.md, y)},
                                   {DNNL_ARG_DIFF_DST, as_memory(plan.md, dy)},
                                   {DNNL_ARG_DIFF_SRC, as_memory(plan.md, dx)}});
  }
  DT_CHECK(y.dtype() == dy.dtype() && dy.dtype() == dx.dtype(), "activation backward between dtypes");
  auto& plan = eltwise_plan(act, y.numel(), y.dtype());
  execute(plan.backward, {{DNNL_ARG_DST, as_memory(plan.md, y)},
                          {DNNL_ARG_DIFF_DST, as_memory(plan.md, dy)},
                          {DNNL_ARG_DIFF_SRC, as_memory(plan.md, dx)}});
}

}  // namespace dtrain::kernels::cpu
