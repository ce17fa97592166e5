// Dense: a fully connected layer on kernels::dense_* (oneDNN matmul), over the
// last axis: a (T, in) sequence input is T rows of the matmul, as in Keras.
// relu/sigmoid/tanh are fused into the matmul; softmax and gelu run after it
// (gelu keeps its input, the matmul's output, for its backward pass).
// Its registry entry (layer_registry.h: keys, reader, builder) closes the file.
#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/layers.h"

namespace dtrain::nn {

namespace {

// The per-sample shape with its last axis replaced by `units`.
Shape with_last(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}

}  // namespace

Dense::Dense(const std::string& name, const Shape& input, int64_t units, Activation act, bool use_bias)
    : Layer(name, "Dense", input, with_last(input, units)), act_(act), use_bias_(use_bias) {
  const int64_t in = input.back();
  kernel_ = {name + "/kernel", Tensor({in, units}), Tensor({in, units})};
  if (use_bias_) bias_ = {name + "/bias", Tensor({units}), Tensor({units})};
}

void Dense::split(const DenseSplit& split) {
  const int64_t in = input_shape().back(), units = output_shape().back();
  const int64_t parts = split.parts;
  DT_CHECK(!split_ && parts >= 1 && split.index >= 0 && split.index < parts && split.all_reduce, "a Dense split");
  DT_CHECK(kernel_.value.device().is_cpu(), "a Dense layer is split before it is placed");
  const Tensor whole = kernel_.value;
  if (split.kind == DenseSplit::Kind::kColumn) {
    DT_CHECK(units % parts == 0, name(), ": ", units, " units over ", parts, " parts");
    const int64_t part = units / parts, first = split.index * part;
    Tensor kernel({in, part});
    for (int64_t i = 0; i < in; ++i)
      std::copy_n(whole.data() + i * units + first, part, kernel.data() + i * part);
    kernel_ = {kernel_.name, kernel, Tensor({in, part})};
    if (use_bias_) {
      Tensor bias({part});
      std::copy_n(bias_.value.data() + first, part, bias.data());
      bias_ = {bias_.name, bias, Tensor({part})};
    }
    set_shapes(input_shape(), with_last(output_shape(), part));
  } else {
    DT_CHECK(in % parts == 0, name(), ": ", in, " input features over ", parts, " parts");
    const int64_t part = in / parts;
    Tensor kernel({part, units});
    std::copy_n(whole.data() + split.index * part * units, part * units, kernel.data());
    kernel_ = {kernel_.name, kernel, Tensor({part, units})};
    set_shapes(with_last(input_shape(), part), output_shape());
  }
  split_ = split;
}

std::vector<Param*> Dense::params() {
  if (use_bias_) return {&kernel_, &bias_};
  return {&kernel_};
}

// bfloat16 too, and float16 on a GPU (the CPU backend has no float16 kernels);
// float32 with a softmax activation, as in Keras' mixed precision.
bool Dense::supports_dtype(DType dtype) const {
  if (dtype == DType::kF32) return true;
  if (kernels::grad_from_input(act_)) return false;  // gelu's gradient kernels are float32
  return act_ != Activation::kSoftmax && (dtype == DType::kBF16 || !device().is_cpu());
}

bool Dense::supports_product_dtype(DType dtype) const {
  return dtype == DType::kF32 || (dtype == DType::kBF16 && device().is_cpu() && act_ != Activation::kSoftmax);
}

void Dense::refresh_compute_weights() { refresh_copy(kernel_, kernel_copy_); }

LayerBuffers Dense::buffers(int64_t rows, DType dtype, bool need_dx) const {
  const int64_t out = output_bytes(rows, dtype);
  const int64_t before_gelu = kernels::grad_from_input(act_) ? out : 0;
  LayerBuffers b{out + before_gelu, (need_dx ? input_bytes(rows, dtype) : 0) + (act_ != Activation::kLinear ? out : 0)};
  if (dtype == DType::kF32 && product_dtype() != DType::kF32) {
    b.forward += input_bytes(rows, product_dtype());    // x's copy, for the weight gradient
    b.backward += output_bytes(rows, product_dtype());  // dpre's
  }
  return b;
}

int64_t Dense::weight_copy_bytes(DType dtype) const {
  const DType copy = dtype != DType::kF32 ? dtype : product_dtype();
  return copy == DType::kF32 ? 0 : kernel_.value.numel() * static_cast<int64_t>(dtype_size(copy));
}

void Dense::initialize(Rng& rng) {
  glorot_uniform(kernel_.value, kernel_.value.dim(0), kernel_.value.dim(1), rng);
  if (use_bias_) bias_.value.zero();
}

// x as matmul rows: (N, in), or (N * T, in) for a sequence.
Tensor Dense::rows(const Tensor& t, int64_t features) { return t.reshaped({t.numel() / features, features}); }

Tensor Dense::row_split_forward(const Tensor& x) {
  const int64_t n = x.dim(0), in = input_shape().back(), units = output_shape().back();
  // z = the whole layer's x . kernel + bias: each part's product (the bias on
  // part 0 only), summed over the group; then the activation.
  Tensor& z = reuse(z_, n, output_shape());
  Tensor z_rows = rows(z, units);
  kernels::dense_forward(rows(xp_, in), compute_weights(kernel_, kernel_copy_),
                         use_bias_ && split_->index == 0 ? &bias_.value : nullptr, Activation::kLinear, z_rows);
  split_->all_reduce(z);
  if (act_ == Activation::kLinear) return z;
  Tensor& y = reuse(y_, n, output_shape());
  kernels::activation_forward(act_, z, y);
  return y;
}

Tensor Dense::forward(const Tensor& x, const StepContext& ctx) {
  const int64_t n = x.dim(0), in = input_shape().back(), units = output_shape().back();
  x_ = x;
  xp_ = product_operand(x, xp_);  // x itself, or its copy in the product dtype
  const Tensor& kernel = compute_weights(kernel_, kernel_copy_);
  if (split_ && split_->kind == DenseSplit::Kind::kRow) {
    Tensor y = row_split_forward(x);
    y_ = y;  // (the activation's backward reads it)
    return y;
  }
  Tensor& y = reuse(y_, n, output_shape());
  Tensor y_rows = rows(y, units);
  const Tensor* bias = use_bias_ ? &bias_.value : nullptr;
  if (act_ == Activation::kSoftmax) {
    kernels::dense_forward(rows(x, in), kernel_.value, bias, Activation::kLinear, y_rows);  // float32 only
    kernels::activation_forward(Activation::kSoftmax, y, y);
  } else if (kernels::grad_from_input(act_)) {  // gelu: keep the matmul's output for the backward pass
    Tensor& z = reuse(z_, n, output_shape());
    Tensor z_rows = rows(z, units);
    kernels::dense_forward(rows(xp_, in), kernel, bias, Activation::kLinear, z_rows);
    kernels::activation_forward(act_, z, y);
  } else {
    kernels::dense_forward(rows(xp_, in), kernel, bias, act_, y_rows);
  }
  return y;
}

Tensor Dense::backward(const Tensor& dy, bool need_dx) {
  const int64_t n = dy.dim(0), in = input_shape().back(), units = output_shape().back();
  Tensor dpre;
  if (kernels::grad_from_input(act_)) {
    dpre = reuse(dpre_, n, output_shape());
    kernels::activation_backward_from_input(act_, z_, dy, dpre);
  } else {
    dpre = before_activation(act_, y_, dy, dpre_);
  }
  dpre = product_operand(dpre, dpre_p_);  // (with products in bfloat16, the bias gradient sums it too)
  kernels::dense_backward_weights(rows(xp_, in), rows(dpre, units), kernel_.grad, use_bias_ ? &bias_.grad : nullptr);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, n, input_shape());
  Tensor dx_rows = rows(dx, in);
  kernels::dense_backward_data(rows(dpre, units), compute_weights(kernel_, kernel_copy_), dx_rows);
  // A column part's dx is its share of the whole layer's: summed over the group.
  if (split_ && split_->kind == DenseSplit::Kind::kColumn) split_->all_reduce(dx);
  return dx;
}

Tensor Dense::decode(const Tensor& x, int64_t) {
  const int64_t units = output_shape().back();
  Tensor y({x.dim(0), units}, device());
  const Tensor* bias = use_bias_ ? &bias_.value : nullptr;
  const bool after = act_ == Activation::kSoftmax || kernels::grad_from_input(act_);
  kernels::dense_forward(x, kernel_.value, bias, after ? Activation::kLinear : act_, y);
  if (after) kernels::activation_forward(act_, y, y);
  return y;
}

// The registry entry (layer_registry.h): keys, reader, builder.
const LayerType& dense_layer_type() {
  static const LayerType type{
      "Dense",
      "a fully connected layer, `activation(x . kernel + bias)`",
      {{"units", "output features (required, >= 1)"},
       {"activation", "`linear` (default), `relu`, `sigmoid`, `tanh`, `softmax`, `gelu`, `gelu_approximate`"},
       {"use_bias", "true"}},
      [](config::Section& r) {
        auto o = std::make_shared<DenseOptions>();
        o->units = r.require_int("units", 1);
        o->activation = get_activation(r, "activation", o->activation);
        o->use_bias = r.get_bool("use_bias", o->use_bias);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        const auto& o = spec.options_as<DenseOptions>();
        // Features, or a sequence of them (T, features); an image needs a Flatten first.
        if (input.size() != 1 && input.size() != 2)
          throw ConfigError(str(layer_where(spec, ctx.name), ": expects a flat input (features,) or a sequence "
                                "(time, features), got ", shape_str(input), "; add {\"type\": \"Flatten\"} before it"));
        return std::make_unique<Dense>(ctx.name, input, o.units, o.activation, o.use_bias);
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
