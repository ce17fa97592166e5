// Residual: y = act(layers(x) + shortcut(x)). Forward runs both branches and adds
// their outputs; backward sends the same gradient down both and adds the two
// input gradients. Sums go into the block's own tensors, never into a child's,
// because a child's output may be its input (Dropout at inference) or be kept
// for its own backward (an Activation's y).
// Its registry entry (layer_registry.h: keys, reader, builder) closes the file.
#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/layers.h"

namespace dtrain::nn {

Tensor forward_branch(Residual::Branch& branch, const Tensor& x, const StepContext& ctx) {
  Tensor h = x;
  for (auto& layer : branch) h = layer->run_forward(h, ctx);
  return h;
}

Tensor backward_branch(Residual::Branch& branch, const Tensor& dy, bool need_dx) {
  Tensor g = dy;
  for (size_t i = branch.size(); i-- > 0;) g = branch[i]->run_backward(g, need_dx || i > 0);
  return g;
}

Residual::Residual(const std::string& name, const Shape& input, Branch layers, Branch shortcut,
                   Activation act)
    : Layer(name, "Residual", input, layers.back()->output_shape()),
      act_(act),
      layers_(std::move(layers)),
      shortcut_(std::move(shortcut)) {}

Tensor Residual::forward(const Tensor& x, const StepContext& ctx) {
  const Tensor a = forward_branch(layers_, x, ctx);
  const Tensor b = forward_branch(shortcut_, x, ctx);  // x itself for the identity
  const int64_t n = x.dim(0);
  Tensor& sum = reuse(sum_, n, output_shape());
  sum.copy_from(a);
  kernels::axpy(1.0f, b, sum);
  if (act_ == Activation::kLinear) return sum;
  Tensor& y = reuse(y_, n, output_shape());
  kernels::activation_forward(act_, sum, y);
  return y;
}

Tensor Residual::backward(const Tensor& dy, bool need_dx) {
  const Tensor dsum = before_activation(act_, y_, dy, dsum_);
  const Tensor da = backward_branch(layers_, dsum, need_dx);
  const Tensor db = shortcut_.empty() ? dsum : backward_branch(shortcut_, dsum, need_dx);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, dy.dim(0), input_shape());
  dx.copy_from(da);
  kernels::axpy(1.0f, db, dx);
  return dx;
}

void Residual::start_decoding(int64_t batch, int64_t positions) {
  for (const Branch* branch : {&layers_, &shortcut_})
    for (auto& layer : *branch) layer->start_decoding(batch, positions);
}

Tensor Residual::decode(const Tensor& x, int64_t position) {
  Tensor a = x, b = x;
  for (auto& layer : layers_) a = layer->decode(a, position);
  for (auto& layer : shortcut_) b = layer->decode(b, position);
  Tensor sum(a.shape(), a.device());
  sum.copy_from(a);
  kernels::axpy(1.0f, b, sum);
  if (act_ != Activation::kLinear) kernels::activation_forward(act_, sum, sum);
  return sum;
}

std::vector<Param*> Residual::params() {
  std::vector<Param*> out;
  for (const Branch* branch : {&layers_, &shortcut_})
    for (auto& layer : *branch)
      for (Param* p : layer->params()) out.push_back(p);
  return out;
}

void Residual::initialize(Rng& rng) {
  // Each child draws from its own stream, as Sequential's layers do.
  const uint64_t seed = rng.next_u64();
  uint64_t index = 0;
  for (const Branch* branch : {&layers_, &shortcut_})
    for (auto& layer : *branch) {
      Rng child(hash_u64(seed, index++));
      layer->initialize(child);
    }
}

LayerBuffers Residual::buffers(int64_t rows, DType dtype, bool need_dx) const {
  // The children compute in float32 (Sequential sets the dtype of its own layers
  // only, and a block computes in float32). Within a branch, a layer's input
  // gradient is needed above the branch's first layer, or when the block's is.
  LayerBuffers b;
  for (const Branch* branch : {&layers_, &shortcut_})
    for (size_t i = 0; i < branch->size(); ++i) {
      const LayerBuffers c = (*branch)[i]->buffers(rows, DType::kF32, need_dx || i > 0);
      b.forward += c.forward;
      b.backward += c.backward;
    }
  const int64_t out = output_bytes(rows, dtype);
  const bool act = act_ != Activation::kLinear;
  b.forward += out * (act ? 2 : 1);                                              // sum, and y after an activation
  b.backward += (need_dx ? input_bytes(rows, dtype) : 0) + (act ? out : 0);  // dx, dsum
  return b;
}

std::vector<Layer*> Residual::children() {
  std::vector<Layer*> out;
  for (const Branch* branch : {&layers_, &shortcut_})
    for (auto& layer : *branch) out.push_back(layer.get());
  return out;
}

void Residual::move_extras(const Device& device) {
  for (const Branch* branch : {&layers_, &shortcut_})
    for (auto& layer : *branch) layer->set_device(device);
  sum_ = y_ = dsum_ = dx_ = Tensor();
}

namespace {

std::unique_ptr<Layer> build_residual(const LayerSpec& spec, const Shape& input, BuildContext& ctx) {
  const auto& o = spec.options_as<ResidualOptions>();
  if (o.layers.empty()) throw ConfigError(str(spec.path, ".layers: a Residual block needs at least one layer"));
  // branch_id keeps the children's dropout streams apart from every other layer's.
  auto build = [&](const std::vector<LayerSpec>& specs, uint64_t branch_id) {
    Residual::Branch branch;
    Shape shape = input;
    for (size_t i = 0; i < specs.size(); ++i) {
      const LayerSpec& child = specs[i];
      const std::string child_name =
          child.name.empty() ? auto_layer_name(child.type_name(), *ctx.name_counts) : child.name;
      branch.push_back(
          make_layer(child, shape, child_name, hash_u64(ctx.layer_index, branch_id, i), *ctx.name_counts));
      shape = branch.back()->output_shape();
    }
    return branch;
  };
  Residual::Branch layers = build(o.layers, 0x6d61696eull /* "main" */);
  Residual::Branch shortcut = build(o.shortcut, 0x73686f72ull /* "shor" */);
  const Shape& main_out = layers.back()->output_shape();
  const Shape& shortcut_out = shortcut.empty() ? input : shortcut.back()->output_shape();
  if (main_out != shortcut_out) {
    // A projection shortcut that gives the main branch's shape, where one layer can.
    std::string example = "layers that change the shape the same way";
    if (main_out.size() == 1 && input.size() == 1)
      example = str("[{\"type\": \"Dense\", \"units\": ", main_out[0], "}]");
    else if (main_out.size() == 3 && input.size() == 3 && main_out[0] > 0)
      // "same" padding gives ceil(input / stride) rows: the stride is input / output rounded up.
      example = str("[{\"type\": \"Conv2D\", \"filters\": ", main_out[2], ", \"kernel_size\": 1, \"strides\": ",
                    std::max<int64_t>((input[0] + main_out[0] - 1) / main_out[0], 1), ", \"padding\": \"same\"}]");
    throw ConfigError(str(layer_where(spec, ctx.name), ": its layers end in ", shape_str(main_out),
                          " but its shortcut ", shortcut.empty() ? "(the identity) passes on " : "ends in ",
                          shape_str(shortcut_out),
                          "; the two are added, so they must match: give the block a \"shortcut\" such as ",
                          example));
  }
  return std::make_unique<Residual>(ctx.name, input, std::move(layers), std::move(shortcut), o.activation);
}

}  // namespace

// The registry entry (layer_registry.h): keys, reader (nested layer lists),
// builder, and the nested specs for the model's name checks.
const LayerType& residual_layer_type() {
  static const LayerType type{
      "Residual",
      "a ResNet block, `activation(layers(x) + shortcut(x))`; both branches must end in the same shape "
      "(else exit 2 naming both); their layers are named like the model's (`conv2d_3`, ...)",
      {{"layers", "a list of layers (required, not empty)"},
       {"shortcut", "a list of layers; `[]`, the default, is the identity"},
       {"activation", "`linear` (default), `relu`, `sigmoid`, `tanh`, `softmax`"}},
      [](config::Section& r) {
        auto o = std::make_shared<ResidualOptions>();
        o->layers = read_layer_list(r.require("layers", " (the block's layers, an array of layer objects)"),
                                    "a Residual block needs at least one layer, got an empty array");
        if (const auto shortcut = r.find("shortcut")) o->shortcut = read_layer_list(*shortcut, /*if_empty=*/nullptr);
        o->activation = get_fused_activation(r, "activation", o->activation);
        return o;
      },
      build_residual,
      [](const LayerOptions& options) {
        const auto& o = dynamic_cast<const ResidualOptions&>(options);
        std::vector<const LayerSpec*> children;
        for (const LayerSpec& l : o.layers) children.push_back(&l);
        for (const LayerSpec& l : o.shortcut) children.push_back(&l);
        return children;
      }};
  return type;
}

}  // namespace dtrain::nn
