// Pool2D: MaxPooling2D, AveragePooling2D and GlobalAveragePooling2D on kernels::pool2d_*.
// GlobalAveragePooling2D is an average pool whose window is the whole image; its
// output (1, 1, C) per sample is presented as (C).
// Its registry entry (layer_registry.h: keys, reader, builder) closes the file.
#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/layers.h"

namespace dtrain::nn {
namespace {

// The 4-D view oneDNN pools over: (N, H, W, C) for the layer's output shape,
// which is (C) for global pooling.
Shape pooled_4d(int64_t n, const Shape& out) {
  return out.size() == 1 ? Shape{n, 1, 1, out[0]} : with_batch(n, out);
}

}  // namespace

Pool2D::Pool2D(const std::string& name, const std::string& type, const Shape& input,
               const Shape& output, const kernels::Pool2DParams& p)
    : Layer(name, type, input, output), p_(p) {}

Tensor Pool2D::forward(const Tensor& x, const StepContext& ctx) {
  const int64_t n = x.dim(0);
  Tensor& y = reuse(y_, n, output_shape());
  Tensor y4 = y.reshaped(pooled_4d(n, output_shape()));
  kernels::pool2d_forward(x, p_, y4, ctx.training ? &ws_ : nullptr);
  return y;
}

Tensor Pool2D::backward(const Tensor& dy, bool need_dx) {
  if (!need_dx) return {};
  const int64_t n = dy.dim(0);
  Tensor& dx = reuse(dx_, n, input_shape());
  kernels::pool2d_backward(dy.reshaped(pooled_4d(n, output_shape())), p_, &ws_, dx);
  return dx;
}

namespace {

std::shared_ptr<const LayerOptions> read_pool(config::Section& r) {
  auto o = std::make_shared<Pool2DOptions>();
  r.get_pair("pool_size", o->pool_size);
  o->strides[0] = o->pool_size[0];  // Keras: strides default to pool_size
  o->strides[1] = o->pool_size[1];
  const auto strides = r.find("strides");
  if (strides && !strides->is_null()) strides->to_pair(o->strides);
  o->same_padding = r.get_choice("padding", "valid", {"valid", "same"}, "padding") == "same";
  return o;
}

std::unique_ptr<Layer> build_pool(const LayerSpec& spec, const Shape& input, BuildContext& ctx,
                                  kernels::PoolKind kind) {
  const auto& o = spec.options_as<Pool2DOptions>();
  require_image(spec, ctx.name, input);
  AxisPlan a[2];
  plan_window(spec, ctx.name, input, o.pool_size, o.strides, o.same_padding, "pool window", a);
  kernels::Pool2DParams p;
  p.kind = kind;
  for (int i = 0; i < 2; ++i) {
    p.kernel[i] = o.pool_size[i];
    p.stride[i] = o.strides[i];
    p.pad_before[i] = a[i].pad_before;
    p.pad_after[i] = a[i].pad_after;
  }
  return std::make_unique<Pool2D>(ctx.name, spec.type_name(), input, Shape{a[0].out, a[1].out, input[2]}, p);
}

const std::vector<config::KeyDoc> kPoolKeys = {{"pool_size", "an int or `[h, w]` (2)"},
                                               {"strides", "an int or `[h, w]` (= `pool_size`)"},
                                               {"padding", "`valid` (default) or `same`"}};

}  // namespace

// The registry entries (layer_registry.h) of the three pooling layers.
const LayerType& max_pooling2d_layer_type() {
  static const LayerType type{"MaxPooling2D", "the maximum of each window", kPoolKeys, read_pool,
                              [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) {
                                return build_pool(spec, input, ctx, kernels::PoolKind::kMax);
                              },
                              nullptr};
  return type;
}

const LayerType& average_pooling2d_layer_type() {
  static const LayerType type{"AveragePooling2D", "the mean of each window (padding excluded, as in Keras)",
                              kPoolKeys, read_pool,
                              [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) {
                                return build_pool(spec, input, ctx, kernels::PoolKind::kAverage);
                              },
                              nullptr};
  return type;
}

const LayerType& global_average_pooling2d_layer_type() {
  static const LayerType type{
      "GlobalAveragePooling2D",
      "the mean over height and width: `(h, w, c)` -> `(c)`",
      {},
      [](config::Section&) { return std::make_shared<LayerOptions>(); },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        require_image(spec, ctx.name, input);
        kernels::Pool2DParams p;
        p.kind = kernels::PoolKind::kAverage;
        p.kernel[0] = p.stride[0] = input[0];
        p.kernel[1] = p.stride[1] = input[1];
        return std::make_unique<Pool2D>(ctx.name, spec.type_name(), input, Shape{input[2]}, p);
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
