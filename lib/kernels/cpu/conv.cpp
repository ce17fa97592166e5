// Conv2D on oneDNN's convolution primitives (forward, backward data, backward weights).
//
// oneDNN describes convolutions with logical NCHW dims; the format tags say the
// memory is really NHWC (activations) and HWIO (Keras' kernel layout), so tensors
// are used in place without reordering.
#include "core/check.h"
#include "core/strings.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/onednn.h"

namespace dtrain::kernels::cpu {
namespace {

using dnnl::memory;

struct ConvDescs {
  memory::desc src, weights, bias, dst;
  memory::dims strides, pad_l, pad_r;
};

// x (N, H, W, C), w (KH, KW, C, F), y (N, OH, OW, F)
ConvDescs conv_descs(const Shape& x, const Shape& w, const Shape& y, const Conv2DParams& p) {
  ConvDescs d;
  d.src = memory::desc({x[0], x[3], x[1], x[2]}, kF32, Tag::nhwc);
  d.weights = memory::desc({w[3], w[2], w[0], w[1]}, kF32, Tag::hwio);
  d.bias = memory::desc({w[3]}, kF32, Tag::a);
  d.dst = memory::desc({y[0], y[3], y[1], y[2]}, kF32, Tag::nhwc);
  d.strides = {p.stride[0], p.stride[1]};
  d.pad_l = {p.pad_before[0], p.pad_before[1]};
  d.pad_r = {p.pad_after[0], p.pad_after[1]};
  return d;
}

std::string conv_key(const char* what, const Shape& x, const Shape& w, const Shape& y,
                     const Conv2DParams& p, int extra) {
  return str(what, shape_str(x), shape_str(w), shape_str(y), p.stride[0], ",", p.stride[1], ",",
             p.pad_before[0], ",", p.pad_before[1], ",", p.pad_after[0], ",", p.pad_after[1], ",",
             extra);
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d, bool bias,
                                                     const dnnl::primitive_attr& attr) {
  const auto desc =
      bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                             dnnl::algorithm::convolution_direct, d.src, d.weights,
                                             d.bias, d.dst, d.strides, d.pad_l, d.pad_r)
           : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                             dnnl::algorithm::convolution_direct, d.src, d.weights,
                                             d.dst, d.strides, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, engine());
}

struct ForwardPlan {
  ConvDescs d;
  dnnl::convolution_forward prim;
};
struct BackwardDataPlan {
  ConvDescs d;
  dnnl::convolution_backward_data prim;
};
struct BackwardWeightsPlan {
  ConvDescs d;
  dnnl::convolution_backward_weights prim;
};

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2DParams& p,
                    Activation act, Tensor& y) {
  DT_CHECK(x.rank() == 4 && w.rank() == 4 && y.rank() == 4, "conv2d ranks");
  DT_CHECK_EQ(x.dim(3), w.dim(2));
  DT_CHECK_EQ(y.dim(3), w.dim(3));
  const int extra = (b ? 1 : 0) + 2 * static_cast<int>(act);
  auto& plan = cached<ForwardPlan>(conv_key("conv_fwd", x.shape(), w.shape(), y.shape(), p, extra), [&] {
    ForwardPlan plan;
    plan.d = conv_descs(x.shape(), w.shape(), y.shape(), p);
    dnnl::primitive_attr attr;
    if (act != Activation::kLinear) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, eltwise_algorithm(act), 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    plan.prim = dnnl::convolution_forward(forward_pd(plan.d, b != nullptr, attr));
    return plan;
  });
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, as_memory(plan.d.src, x)},
                                          {DNNL_ARG_WEIGHTS, as_memory(plan.d.weights, w)},
                                          {DNNL_ARG_DST, as_memory(plan.d.dst, y)}};
  if (b) args.emplace(DNNL_ARG_BIAS, as_memory(plan.d.bias, *b));
  execute(plan.prim, args);
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Conv2DParams& p, Tensor& dx) {
  auto& plan = cached<BackwardDataPlan>(conv_key("conv_bwd_data", dx.shape(), w.shape(), dy.shape(), p, 0), [&] {
    BackwardDataPlan plan;
    plan.d = conv_descs(dx.shape(), w.shape(), dy.shape(), p);
    const auto hint = forward_pd(plan.d, false, dnnl::primitive_attr());
    const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct,
                                                     plan.d.src, plan.d.weights, plan.d.dst,
                                                     plan.d.strides, plan.d.pad_l, plan.d.pad_r);
    plan.prim = dnnl::convolution_backward_data(
        dnnl::convolution_backward_data::primitive_desc(desc, engine(), hint));
    return plan;
  });
  execute(plan.prim, {{DNNL_ARG_DIFF_DST, as_memory(plan.d.dst, dy)},
                      {DNNL_ARG_WEIGHTS, as_memory(plan.d.weights, w)},
                      {DNNL_ARG_DIFF_SRC, as_memory(plan.d.src, dx)}});
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2DParams& p, Tensor& dw,
                             Tensor* db) {
  const int extra = db ? 1 : 0;
  auto& plan = cached<BackwardWeightsPlan>(conv_key("conv_bwd_w", x.shape(), dw.shape(), dy.shape(), p, extra), [&] {
    BackwardWeightsPlan plan;
    plan.d = conv_descs(x.shape(), dw.shape(), dy.shape(), p);
    const auto hint = forward_pd(plan.d, db != nullptr, dnnl::primitive_attr());
    const auto desc =
        db ? dnnl::convolution_backward_weights::desc(
                 dnnl::algorithm::convolution_direct, plan.d.src, plan.d.weights, plan.d.bias,
                 plan.d.dst, plan.d.strides, plan.d.pad_l, plan.d.pad_r)
           : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                      plan.d.src, plan.d.weights, plan.d.dst,
                                                      plan.d.strides, plan.d.pad_l, plan.d.pad_r);
    plan.prim = dnnl::convolution_backward_weights(
        dnnl::convolution_backward_weights::primitive_desc(desc, engine(), hint));
    return plan;
  });
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, as_memory(plan.d.src, x)},
                                          {DNNL_ARG_DIFF_DST, as_memory(plan.d.dst, dy)},
                                          {DNNL_ARG_DIFF_WEIGHTS, as_memory(plan.d.weights, dw)}};
  if (db) args.emplace(DNNL_ARG_DIFF_BIAS, as_memory(plan.d.bias, *db));
  execute(plan.prim, args);
}

}  // namespace dtrain::kernels::cpu
