// Conv2D on oneDNN's convolution primitives (forward, backward data, backward weights).
//
// oneDNN describes convolutions with logical NCHW dims; the format tags say the
// memory is really NHWC (activations) and HWIO (Keras' kernel layout), so
// activations are used in place.
//
// The weights are the exception. Fixed to HWIO, oneDNN 2.6 falls back to its
// gemm-based convolution (x64:gemm:jit: 4.3 ms forward for the CNN's first layer,
// (64,28,28,1) * 3x3x1x32); with the weights' layout left to it (format `any`) it
// picks its direct jit:avx2 kernel with blocked weights (0.66 ms forward, backward
// weights 1.63 vs 2.26 ms). So the primitives are created with `any` weights, and
// when the chosen layout is not HWIO the (small) weights are reordered into it
// before forward/backward-data, and the weight gradient is reordered back to HWIO
// after backward-weights (backward-data keeps HWIO where blocking would mostly pad
// the weights: see conv2d_backward_data). Activations stay NHWC: `any` there too
// led to ref:any (~340 ms). The bias stays a plain vector.
//
// Activations and weights may be bfloat16 (mixed precision); the weight and bias
// gradients and the bias stay float32. Each primitive takes the dtypes of the
// tensors it is called with (part of its cache key).
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

// x (N, H, W, C), w (KH, KW, C, F), y (N, OH, OW, F), in the dtypes of xt, wt, yt
// (float32 in place of bfloat16 when emulated).
ConvDescs conv_descs(const Tensor& xt, const Tensor& wt, const Tensor& yt, const Conv2DParams& p,
                     bool emulated) {
  const Shape &x = xt.shape(), &w = wt.shape(), &y = yt.shape();
  ConvDescs d;
  d.src = memory::desc({x[0], x[3], x[1], x[2]}, compute_type(xt, emulated), Tag::nhwc);
  d.weights = memory::desc({w[3], w[2], w[0], w[1]}, compute_type(wt, emulated), Tag::hwio);
  d.bias = memory::desc({w[3]}, kF32, Tag::a);
  d.dst = memory::desc({y[0], y[3], y[1], y[2]}, compute_type(yt, emulated), Tag::nhwc);
  d.strides = {p.stride[0], p.stride[1]};
  d.pad_l = {p.pad_before[0], p.pad_before[1]};
  d.pad_r = {p.pad_after[0], p.pad_after[1]};
  return d;
}

std::string conv_key(const char* what, const Tensor& x, const Tensor& w, const Tensor& y,
                     const Conv2DParams& p, int extra) {
  return str(what, shape_str(x.shape()), shape_str(w.shape()), shape_str(y.shape()), p.stride[0], ",",
             p.stride[1], ",", p.pad_before[0], ",", p.pad_before[1], ",", p.pad_after[0], ",",
             p.pad_after[1], ",", extra, ",", dtype_key({&x, &w, &y}));
}

// "a Conv2D forward pass, input (64,28,28,1), kernel (3,3,1,32), output ..., strides 1,1 ...": for errors.
Describe conv_describe(const char* pass, const Tensor& x, const Tensor& w, const Tensor& y,
                       const Conv2DParams& p) {
  return [pass, &x, &w, &y, &p] {
    return str("a Conv2D ", pass, " (input ", shape_str(x.shape()), ", kernel ", shape_str(w.shape()),
               ", output ", shape_str(y.shape()), ", strides ", p.stride[0], ",", p.stride[1], ", padding ",
               p.pad_before[0], ",", p.pad_before[1], ",", p.pad_after[0], ",", p.pad_after[1], ") in ",
               dtype_key({&x, &w, &y}), " (input, kernel, output)");
  };
}


// Weights as oneDNN may lay them out: same dims, layout left to the primitive.
memory::desc any_layout(const memory::desc& md) {
  return memory::desc(md.dims(), md.data_type(), Tag::any);
}

// A forward primitive desc over `weights` (HWIO, or `any` to let oneDNN choose);
// also the hint the backward passes are created with.
dnnl::convolution_forward::primitive_desc forward_pd(const ConvDescs& d,
                                                     const memory::desc& weights, bool bias,
                                                     const dnnl::primitive_attr& attr) {
  const auto desc =
      bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                             dnnl::algorithm::convolution_direct, d.src, weights,
                                             d.bias, d.dst, d.strides, d.pad_l, d.pad_r)
           : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                             dnnl::algorithm::convolution_direct, d.src, weights,
                                             d.dst, d.strides, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, engine());
}

// The weights in the layout a primitive chose, when that is not HWIO: a reorder
// between the two and this thread's buffer in the chosen layout (plans are cached
// per thread, so replicas on different threads never share the buffer).
struct WeightsLayout {
  bool reorder = false;
  memory chosen;          // oneDNN-allocated buffer in the primitive's layout
  dnnl::reorder convert;  // HWIO -> chosen (forward, backward data) or back (backward weights)

  WeightsLayout() = default;
  WeightsLayout(const memory::desc& hwio, const memory::desc& picked, bool to_picked)
      : reorder(picked != hwio) {
    if (!reorder) return;
    chosen = memory(picked, engine());
    const memory::desc& from = to_picked ? hwio : picked;
    const memory::desc& to = to_picked ? picked : hwio;
    convert = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
  }

  // The weights to hand the primitive: w itself, or w reordered into `chosen`.
  memory to_primitive(const memory& w) {
    if (!reorder) return w;
    execute(convert, {{DNNL_ARG_FROM, w}, {DNNL_ARG_TO, chosen}});
    return chosen;
  }
  // Where the primitive writes diff weights: dw itself, or `chosen` (see to_user).
  memory from_primitive(const memory& dw) { return reorder ? chosen : dw; }
  void to_user(const memory& dw) {
    if (reorder) execute(convert, {{DNNL_ARG_FROM, chosen}, {DNNL_ARG_TO, dw}});
  }
};

// Each plan may be emulated: float32 primitives in place of bfloat16 (onednn.h).
struct ForwardPlan {
  ConvDescs d;
  dnnl::convolution_forward prim;
  WeightsLayout weights;
  bool emulated = false;
};
struct BackwardDataPlan {
  ConvDescs d;
  dnnl::convolution_backward_data prim;
  WeightsLayout weights;
  bool emulated = false;
};
struct BackwardWeightsPlan {
  ConvDescs d;
  dnnl::convolution_backward_weights prim;
  WeightsLayout weights;
  bool emulated = false;
};

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* b, const Conv2DParams& p,
                    Activation act, Tensor& y) {
  DT_CHECK(x.rank() == 4 && w.rank() == 4 && y.rank() == 4, "conv2d ranks");
  DT_CHECK_EQ(x.dim(3), w.dim(2));
  DT_CHECK_EQ(y.dim(3), w.dim(3));
  const int extra = (b ? 1 : 0) + 2 * static_cast<int>(act);
  auto& plan = cached<ForwardPlan>(conv_key("conv_fwd", x, w, y, p, extra), [&] {
    const auto make = [&](bool emulated) {
      ForwardPlan plan;
      plan.d = conv_descs(x, w, y, p, emulated);
      dnnl::primitive_attr attr;
      if (act != Activation::kLinear) {
        dnnl::post_ops ops;
        ops.append_eltwise(1.0f, eltwise_algorithm(act), 0.0f, 0.0f);
        attr.set_post_ops(ops);
      }
      const auto pd = forward_pd(plan.d, any_layout(plan.d.weights), b != nullptr, attr);
      // Only the weights are `any`; the bias stays a plain vector.
      DT_CHECK(!b || pd.bias_desc() == plan.d.bias, "conv2d: oneDNN wants another bias layout");
      plan.prim = dnnl::convolution_forward(pd);
      plan.weights = WeightsLayout(plan.d.weights, pd.weights_desc(), true);
      return plan;
    };
    return make_plan<ForwardPlan>(any_bf16({&x, &w, &y}), conv_describe("forward pass", x, w, y, p), make);
  });
  Staging staging(plan.emulated);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, staging.in(plan.d.src, x)},
      {DNNL_ARG_WEIGHTS, plan.weights.to_primitive(staging.in(plan.d.weights, w))},
      {DNNL_ARG_DST, staging.out(plan.d.dst, y)}};
  if (b) args.emplace(DNNL_ARG_BIAS, as_memory(plan.d.bias, *b));
  execute(plan.prim, args, staging);
}

void conv2d_backward_data(const Tensor& dy, const Tensor& w, const Conv2DParams& p, Tensor& dx) {
  auto& plan = cached<BackwardDataPlan>(conv_key("conv_bwd_data", dx, w, dy, p, 0), [&] {
    const auto make = [&](bool emulated) {
      BackwardDataPlan plan;
      plan.d = conv_descs(dx, w, dy, p, emulated);
      auto make_pd = [&](const memory::desc& weights) {
        const auto hint = forward_pd(plan.d, weights, false, dnnl::primitive_attr());
        return dnnl::convolution_backward_data::primitive_desc(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, plan.d.src,
                                                  weights, plan.d.dst, plan.d.strides,
                                                  plan.d.pad_l, plan.d.pad_r),
            engine(), hint);
      };
      auto pd = make_pd(any_layout(plan.d.weights));
      // Backward data blocks the input channels too (ABcd8a8b on AVX2), so with few of
      // them the blocked weights are mostly padding, and jit:avx2 was slower than the
      // gemm path it replaces: (64,32,32,C) 3x3x32, C = 1..4: 6.0-6.5 vs 4.0-5.4 ms;
      // C >= 6 about even. Keep HWIO (gemm) when blocking pads the weights over 1.5x.
      if (2 * pd.weights_desc().get_size() > 3 * plan.d.weights.get_size())
        pd = make_pd(plan.d.weights);
      plan.prim = dnnl::convolution_backward_data(pd);
      plan.weights = WeightsLayout(plan.d.weights, pd.weights_desc(), true);
      return plan;
    };
    return make_plan<BackwardDataPlan>(any_bf16({&dx, &w, &dy}),
                                       conv_describe("backward pass for the input", dx, w, dy, p), make);
  });
  Staging staging(plan.emulated);
  execute(plan.prim,
          {{DNNL_ARG_DIFF_DST, staging.in(plan.d.dst, dy)},
           {DNNL_ARG_WEIGHTS, plan.weights.to_primitive(staging.in(plan.d.weights, w))},
           {DNNL_ARG_DIFF_SRC, staging.out(plan.d.src, dx)}},
          staging);
}

void conv2d_backward_weights(const Tensor& x, const Tensor& dy, const Conv2DParams& p, Tensor& dw,
                             Tensor* db) {
  const int extra = db ? 1 : 0;
  auto& plan = cached<BackwardWeightsPlan>(conv_key("conv_bwd_w", x, dw, dy, p, extra), [&] {
    const auto make = [&](bool emulated) {
      BackwardWeightsPlan plan;
      plan.d = conv_descs(x, dw, dy, p, emulated);
      const memory::desc weights = any_layout(plan.d.weights);
      // The hint is a forward pass whose weights have the activations' dtype (a
      // bfloat16 forward has bfloat16 weights, while their gradient is float32).
      const memory::desc hint_weights(plan.d.weights.dims(), plan.d.src.data_type(), Tag::any);
      const auto hint = forward_pd(plan.d, hint_weights, db != nullptr, dnnl::primitive_attr());
      const auto desc =
          db ? dnnl::convolution_backward_weights::desc(
                   dnnl::algorithm::convolution_direct, plan.d.src, weights, plan.d.bias,
                   plan.d.dst, plan.d.strides, plan.d.pad_l, plan.d.pad_r)
             : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                        plan.d.src, weights, plan.d.dst,
                                                        plan.d.strides, plan.d.pad_l, plan.d.pad_r);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, engine(), hint);
      DT_CHECK(!db || pd.diff_bias_desc() == plan.d.bias, "conv2d: oneDNN wants another bias layout");
      plan.prim = dnnl::convolution_backward_weights(pd);
      plan.weights = WeightsLayout(plan.d.weights, pd.diff_weights_desc(), false);
      return plan;
    };
    return make_plan<BackwardWeightsPlan>(any_bf16({&x, &dw, &dy}),
                                          conv_describe("backward pass for the kernel", x, dw, dy, p), make);
  });
  Staging staging(plan.emulated);
  const memory user_dw = staging.out(plan.d.weights, dw);
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, staging.in(plan.d.src, x)},
                                          {DNNL_ARG_DIFF_DST, staging.in(plan.d.dst, dy)},
                                          {DNNL_ARG_DIFF_WEIGHTS, plan.weights.from_primitive(user_dw)}};
  if (db) args.emplace(DNNL_ARG_DIFF_BIAS, as_memory(plan.d.bias, *db));
  execute(plan.prim, args);
  plan.weights.to_user(user_dw);
  staging.finish();  // after to_user: a staged dw is complete only once back in its layout
}

}  // namespace dtrain::kernels::cpu
