// Implementation of layer_factory.h.
#include "nn/layer_factory.h"

#include <algorithm>
#include <cctype>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_registry.h"

namespace dtrain::nn {
namespace {

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

}  // namespace

std::string layer_where(const LayerSpec& spec, const std::string& name) {
  return str(spec.path, " (", spec.type_name(), " '", name, "')");
}

void require_image(const LayerSpec& spec, const std::string& name, const Shape& input) {
  if (input.size() != 3)
    throw ConfigError(str(layer_where(spec, name), ": expects an image input (height, width, channels), got ",
                          shape_str(input),
                          "; give model.input_shape as [height, width, channels] or remove the Flatten before it"));
}

void plan_window(const LayerSpec& spec, const std::string& name, const Shape& input, const int64_t k[2],
                 const int64_t s[2], bool same, const char* what, AxisPlan out[2]) {
  for (int i = 0; i < 2; ++i) {
    out[i] = plan_axis(input[i], k[i], s[i], same);
    if (out[i].out <= 0)
      throw ConfigError(str(layer_where(spec, name), ": a ", k[0], "x", k[1], " ", what, " does not fit the input ",
                            shape_str(input), " with padding 'valid'; use \"padding\": \"same\" or a smaller ", what));
  }
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
  const int n = counts[base]++;
  return n == 0 ? base : str(base, "_", n);
}

std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const Shape& input, const std::string& name,
                                  uint64_t layer_index, std::map<std::string, int>& name_counts) {
  DT_CHECK(spec.type != nullptr, spec.path, ": a layer spec without a type");
  BuildContext ctx{name, layer_index, &name_counts};
  return spec.type->build(spec, input, ctx);
}

}  // namespace dtrain::nn
