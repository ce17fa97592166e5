// Batch normalization over the channels (last) axis on oneDNN's primitives.
//
// A tensor (N, ..., C) is described to oneDNN as logical (N, C, spatial) with the
// channels-last tag, so no data moves. Scale (gamma) and shift (beta) are passed
// as separate arguments (use_scale | use_shift).
#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"

namespace dtrain::kernels::cpu {
namespace {

using dnnl::memory;
using Flags = dnnl::normalization_flags;

// (N, C), (N, W, C) or (N, H, W, C) as a oneDNN descriptor.
memory::desc data_desc(const Shape& s) {
  const int64_t c = s.back();
  switch (s.size()) {
    case 2: return memory::desc({s[0], c}, kF32, Tag::nc);
    case 3: return memory::desc({s[0], c, s[1]}, kF32, Tag::nwc);
    case 4: return memory::desc({s[0], c, s[1], s[2]}, kF32, Tag::nhwc);
    default: break;
  }
  DT_CHECK(false, "batch norm needs rank 2..4, got ", shape_str(s));
  return {};
}

struct BatchNormPlan {
  memory::desc data, channel;
  dnnl::batch_normalization_forward::primitive_desc forward_pd;
  dnnl::batch_normalization_forward forward;
  dnnl::batch_normalization_backward backward;
};

BatchNormPlan& bn_plan(const Shape& s, float epsilon, bool training) {
  const std::string key = str("bn:", shape_str(s), epsilon, ",", training);
  return cached<BatchNormPlan>(key, [&] {
    BatchNormPlan plan;
    plan.data = data_desc(s);
    plan.channel = memory::desc({s.back()}, kF32, Tag::a);
    const auto flags = training ? (Flags::use_scale | Flags::use_shift)
                                : (Flags::use_scale | Flags::use_shift | Flags::use_global_stats);
    const auto prop = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    plan.forward_pd = dnnl::batch_normalization_forward::primitive_desc(
        dnnl::batch_normalization_forward::desc(prop, plan.data, epsilon, flags), engine());
    plan.forward = dnnl::batch_normalization_forward(plan.forward_pd);
    if (training) {
      plan.backward = dnnl::batch_normalization_backward(
          dnnl::batch_normalization_backward::primitive_desc(
              dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, plan.data,
                                                       plan.data, epsilon, flags),
              engine(), plan.forward_pd));
    }
    return plan;
  });
}

}  // namespace

namespace {

void run_forward(BatchNormPlan& plan, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                 const Tensor& mean, const Tensor& variance, Tensor& y) {
  // Training writes mean/variance (the batch statistics); inference reads them.
  execute(plan.forward, {{DNNL_ARG_SRC, as_memory(plan.data, x)},
                         {DNNL_ARG_DST, as_memory(plan.data, y)},
                         {DNNL_ARG_SCALE, as_memory(plan.channel, gamma)},
                         {DNNL_ARG_SHIFT, as_memory(plan.channel, beta)},
                         {DNNL_ARG_MEAN, as_memory(plan.channel, mean)},
                         {DNNL_ARG_VARIANCE, as_memory(plan.channel, variance)}});
}

}  // namespace

void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 float epsilon, Tensor& y, Tensor& mean, Tensor& variance) {
  run_forward(bn_plan(x.shape(), epsilon, true), x, gamma, beta, mean, variance, y);
}

void batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& mean, const Tensor& variance, float epsilon,
                                  Tensor& y) {
  run_forward(bn_plan(x.shape(), epsilon, false), x, gamma, beta, mean, variance, y);
}

void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                         const Tensor& mean, const Tensor& variance, float epsilon, Tensor& dx,
                         Tensor& dgamma, Tensor& dbeta) {
  auto& plan = bn_plan(x.shape(), epsilon, true);
  execute(plan.backward, {{DNNL_ARG_SRC, as_memory(plan.data, x)},
                          {DNNL_ARG_DIFF_DST, as_memory(plan.data, dy)},
                          {DNNL_ARG_SCALE, as_memory(plan.channel, gamma)},
                          // oneDNN 2.6 insists on a shift argument whenever use_shift is
                          // set, though backward never reads it: hand it dbeta's buffer.
                          {DNNL_ARG_SHIFT, as_memory(plan.channel, dbeta)},
                          {DNNL_ARG_MEAN, as_memory(plan.channel, mean)},
                          {DNNL_ARG_VARIANCE, as_memory(plan.channel, variance)},
                          {DNNL_ARG_DIFF_SRC, as_memory(plan.data, dx)},
                          {DNNL_ARG_DIFF_SCALE, as_memory(plan.channel, dgamma)},
                          {DNNL_ARG_DIFF_SHIFT, as_memory(plan.channel, dbeta)}});
}

}  // namespace dtrain::kernels::cpu
