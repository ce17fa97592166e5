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
  bool emulated = false;  // float32 in place of bfloat16 (onednn.h)
};

const char* activation_label(Activation act) {
  switch (act) {
    case Activation::kRelu: return "relu";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kTanh: return "tanh";
    default: return "linear or softmax";
  }
}

// The plan for activation act over t's elements, in t's dtype.
EltwisePlan& eltwise_plan(Activation act, const Tensor& t) {
  const int64_t n = t.numel();
  const std::string key = str("eltwise:", static_cast<int>(act), ",", n, ",", dtype_name(t.dtype()));
  return cached<EltwisePlan>(key, [&] {
    const Describe describe = [&] {
      return str("a ", activation_label(act), " activation over ", n, " elements in ", dtype_name(t.dtype()));
    };
    return make_plan<EltwisePlan>(any_bf16({&t}), describe, [&](bool emulated) {
      EltwisePlan plan;
      plan.md = memory::desc({n}, compute_type(t, emulated), Tag::a);
      const auto alg = eltwise_algorithm_dst(act);
      const auto fwd_pd = dnnl::eltwise_forward::primitive_desc(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, plan.md, 0.0f, 0.0f),
          engine());
      plan.forward = dnnl::eltwise_forward(fwd_pd);
      plan.backward = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
          dnnl::eltwise_backward::desc(alg, plan.md, plan.md, 0.0f, 0.0f), engine(), fwd_pd));
      return plan;
    });
  });
}

// gelu (exact or tanh) over t's elements in float32: oneDNN's JIT eltwise,
// forward and the backward from the input (gelu's gradient needs x, not y).
struct GeluPlan {
  memory::desc md;
  dnnl::eltwise_forward forward;
  dnnl::eltwise_backward backward;
};

GeluPlan& gelu_plan(Activation act, int64_t n) {
  return cached<GeluPlan>(str("gelu:", static_cast<int>(act), ",", n), [&] {
    GeluPlan plan;
    plan.md = memory::desc({n}, kF32, Tag::a);
    const auto alg = eltwise_algorithm(act);
    const auto fwd_pd = dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, alg, plan.md, 0.0f, 0.0f), engine());
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
  if (grad_from_input(act)) {  // gelu: oneDNN in float32, element_math.h's formula in bfloat16
    if (x.dtype() != DType::kF32) return activation_by_formula(act, x, y);
    auto& plan = gelu_plan(act, x.numel());
    return execute(plan.forward, {{DNNL_ARG_SRC, as_memory(plan.md, x)}, {DNNL_ARG_DST, as_memory(plan.md, y)}});
  }
  if (act == Activation::kSoftmax) {
    DT_CHECK(x.dtype() == DType::kF32 && y.dtype() == DType::kF32, "softmax runs in float32");
    const int64_t cols = x.dim(-1), rows = x.numel() / cols;
    auto& plan = softmax_plan(rows, cols);
    return execute(plan.forward, {{DNNL_ARG_SRC, as_memory(plan.md, x)}, {DNNL_ARG_DST, as_memory(plan.md, y)}});
  }
  DT_CHECK(x.dtype() == y.dtype(), "activation between dtypes");
  auto& plan = eltwise_plan(act, x);
  Staging staging(plan.emulated);
  execute(plan.forward, {{DNNL_ARG_SRC, staging.in(plan.md, x)}, {DNNL_ARG_DST, staging.out(plan.md, y)}},
          staging);
}

void gelu_backward(Activation act, const Tensor& x, const Tensor& dy, Tensor& dx) {
  auto& plan = gelu_plan(act, x.numel());
  execute(plan.backward, {{DNNL_ARG_SRC, as_memory(plan.md, x)},
                          {DNNL_ARG_DIFF_DST, as_memory(plan.md, dy)},
                          {DNNL_ARG_DIFF_SRC, as_memory(plan.md, dx)}});
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
  auto& plan = eltwise_plan(act, y);
  Staging staging(plan.emulated);
  execute(plan.backward,
          {{DNNL_ARG_DST, staging.in(plan.md, y)},
           {DNNL_ARG_DIFF_DST, staging.in(plan.md, dy)},
           {DNNL_ARG_DIFF_SRC, staging.out(plan.md, dx)}},
          staging);
}

}  // namespace dtrain::kernels::cpu
