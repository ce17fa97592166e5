// Implementation of layer_factory.h: output shapes (Keras' "valid"/"same" rules)
// and the checks that make a shape mismatch a clear ConfigError.
#include "nn/layer_factory.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"
#include "nn/layers.h"

namespace dtrain::nn {
namespace {

std::string where(const config::LayerSpec& spec, const std::string& name) {
  return str(spec.path, " (", spec.type, " '", name, "')");
}

// An (H, W, C) input, or a ConfigError that says so.
void require_image(const config::LayerSpec& spec, const std::string& name, const Shape& input) {
  if (input.size() != 3)
    throw ConfigError(str(where(spec, name), ": expects an image input (height, width, channels), got ",
                          shape_str(input),
                          "; give model.input_shape as [height, width, channels] or remove the Flatten before it"));
}

// Output length and padding along one axis (Keras/TF rules).
struct AxisPlan {
  int64_t out = 0, pad_before = 0, pad_after = 0;
};

AxisPlan plan_axis(int64_t in, int64_t k, int64_t s, bool same) {
  AxisPlan a;
  if (same) {
    a.out = (in + s - 1) / s;
    const int64_t total = std::max<int64_t>((a.out - 1) * s + k - in, 0);
    a.pad_before = total / 2;
    a.pad_after = total - a.pad_before;
  } else {
    a.out = in >= k ? (in - k) / s + 1 : 0;
  }
  return a;
}

// Plans a 2-D window (conv kernel or pool) over an (H, W, C) input.
void plan_window(const config::LayerSpec& spec, const std::string& name, const Shape& input,
                 const int64_t k[2], const int64_t s[2], const char* what, AxisPlan out[2]) {
  const bool same = spec.padding == "same";
  for (int i = 0; i < 2; ++i) {
    out[i] = plan_axis(input[i], k[i], s[i], same);
    if (out[i].out <= 0)
      throw ConfigError(str(where(spec, name), ": a ", k[0], "x", k[1], " ", what,
                            " does not fit the input ", shape_str(input),
                            " with padding 'valid'; use \"padding\": \"same\" or a smaller ", what));
  }
}

std::unique_ptr<Layer> make_residual(const config::LayerSpec& spec, const Shape& input,
                                     const std::string& name, uint64_t layer_index,
                                     std::map<std::string, int>& name_counts) {
  // branch_id keeps the children's dropout streams apart from every other layer's.
  if (spec.layers.empty()) throw ConfigError(str(spec.path, ".layers: a Residual block needs at least one layer"));
  auto build = [&](const std::vector<config::LayerSpec>& specs, uint64_t branch_id) {
    Residual::Branch branch;
    Shape shape = input;
    for (size_t i = 0; i < specs.size(); ++i) {
      const config::LayerSpec& child = specs[i];
      const std::string child_name = child.name.empty() ? auto_layer_name(child.type, name_counts) : child.name;
      branch.push_back(make_layer(child, shape, child_name, hash_u64(layer_index, branch_id, i), name_counts));
      shape = branch.back()->output_shape();
    }
    return branch;
  };
  Residual::Branch layers = build(spec.layers, 0x6d61696eull /* "main" */);
  Residual::Branch shortcut = build(spec.shortcut, 0x73686f72ull /* "shor" */);
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
    throw ConfigError(str(where(spec, name), ": its layers end in ", shape_str(main_out), " but its shortcut ",
                          shortcut.empty() ? "(the identity) passes on " : "ends in ", shape_str(shortcut_out),
                          "; the two are added, so they must match: give the block a \"shortcut\" such as ",
                          example));
  }
  return std::make_unique<Residual>(name, input, std::move(layers), std::move(shortcut),
                                    parse_activation(spec.activation, spec.path + ".activation"));
}

}  // namespace

kernels::Activation parse_activation(const std::string& name, const std::string& where_) {
  using kernels::Activation;
  if (name == "relu") return Activation::kRelu;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "tanh") return Activation::kTanh;
  if (name == "softmax") return Activation::kSoftmax;
  if (name == "linear" || name.empty()) return Activation::kLinear;
  throw ConfigError(str(where_, ": unknown activation '", name,
                        "'; valid activations: relu, sigmoid, tanh, softmax, linear"));
}

std::string auto_layer_name(const std::string& type, std::map<std::string, int>& counts) {
  // Keras turns CamelCase class names into snake_case: MaxPooling2D -> max_pooling2d.
  std::string base;
  for (size_t i = 0; i < type.size(); ++i) {
    const char c = type[i];
    if (std::isupper(static_cast<unsigned char>(c))) {
      const bool after_lower = i > 0 && std::islower(static_cast<unsigned char>(type[i - 1]));
      if (after_lower) base += '_';
      base += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      base += c;
    }
  }
  if (type == "Activation") base = "activation";
  const int n = counts[base]++;
  return n == 0 ? base : str(base, "_", n);
}

std::unique_ptr<Layer> make_layer(const config::LayerSpec& spec, const Shape& input,
                                  const std::string& name, uint64_t layer_index,
                                  std::map<std::string, int>& name_counts) {
  const std::string& t = spec.type;
  if (t == "Residual") return make_residual(spec, input, name, layer_index, name_counts);
  if (t == "Dense") {
    if (input.size() != 1)
      throw ConfigError(str(where(spec, name), ": expects a flat input (features,), got ",
                            shape_str(input), "; add {\"type\": \"Flatten\"} before it"));
    return std::make_unique<Dense>(name, input[0], spec.units,
                                   parse_activation(spec.activation, spec.path + ".activation"),
                                   spec.use_bias);
  }
  if (t == "Conv2D") {
    require_image(spec, name, input);
    AxisPlan a[2];
    plan_window(spec, name, input, spec.kernel_size, spec.strides, "kernel", a);
    kernels::Conv2DParams p;
    for (int i = 0; i < 2; ++i) {
      p.stride[i] = spec.strides[i];
      p.pad_before[i] = a[i].pad_before;
      p.pad_after[i] = a[i].pad_after;
    }
    return std::make_unique<Conv2D>(name, input, Shape{a[0].out, a[1].out, spec.filters},
                                    spec.kernel_size[0], spec.kernel_size[1], p,
                                    parse_activation(spec.activation, spec.path + ".activation"),
                                    spec.use_bias);
  }
  if (t == "MaxPooling2D" || t == "AveragePooling2D") {
    require_image(spec, name, input);
    AxisPlan a[2];
    plan_window(spec, name, input, spec.pool_size, spec.strides, "pool window", a);
    kernels::Pool2DParams p;
    p.kind = t == "MaxPooling2D" ? kernels::PoolKind::kMax : kernels::PoolKind::kAverage;
    for (int i = 0; i < 2; ++i) {
      p.kernel[i] = spec.pool_size[i];
      p.stride[i] = spec.strides[i];
      p.pad_before[i] = a[i].pad_before;
      p.pad_after[i] = a[i].pad_after;
    }
    return std::make_unique<Pool2D>(name, t, input, Shape{a[0].out, a[1].out, input[2]}, p);
  }
  if (t == "GlobalAveragePooling2D") {
    require_image(spec, name, input);
    kernels::Pool2DParams p;
    p.kind = kernels::PoolKind::kAverage;
    p.kernel[0] = p.stride[0] = input[0];
    p.kernel[1] = p.stride[1] = input[1];
    return std::make_unique<Pool2D>(name, t, input, Shape{input[2]}, p);
  }
  if (t == "Flatten") return std::make_unique<Flatten>(name, input);
  if (t == "Dropout") return std::make_unique<Dropout>(name, input, static_cast<float>(spec.rate), layer_index);
  if (t == "Activation")
    return std::make_unique<ActivationLayer>(
        name, input, parse_activation(spec.activation, spec.path + ".activation"));
  if (t == "BatchNormalization")
    return std::make_unique<BatchNormalization>(name, input, static_cast<float>(spec.momentum),
                                                static_cast<float>(spec.epsilon), spec.center,
                                                spec.scale);
  throw ConfigError(str(spec.path, ".type: unknown layer type '", t, "'"));
}

}  // namespace dtrain::nn
