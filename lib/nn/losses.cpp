// Implementation of losses.h: the row formulas are kernels::class_loss (shared
// by the CPU and GPU backends); the sums are taken here in row order, so the
// result does not depend on the thread count.
#include "nn/losses.h"

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "nn/layers.h"

namespace dtrain::nn {

Tensor labels_tensor(const std::vector<int32_t>& labels, const Device& device) {
  Tensor host({static_cast<int64_t>(labels.size())});
  float* p = host.data();
  for (size_t i = 0; i < labels.size(); ++i) p[i] = static_cast<float>(labels[i]);  // exact below 2^24
  return host.to(device);
}

void Loss::compute(const Tensor& output, const Tensor& labels, Tensor* grad, float grad_scale, LossRows& rows) const {
  DT_CHECK_GE(output.rank(), 2);
  const int64_t samples = output.dim(0);
  const int64_t classes = output.dim(output.rank() - 1);
  const int64_t n = classes > 0 ? output.numel() / classes : 0;  // label positions, rows of the formula
  DT_CHECK_EQ(labels.numel(), n);
  if (grad) DT_CHECK(grad->shape() == output.shape(), "loss grad shape");
  if (!rows.both.defined() || rows.both.numel() != 2 * n || rows.both.device() != output.device()) {
    rows.both = Tensor({2 * n}, output.device());
    rows.loss = rows.both.flat_slice(0, n);
    rows.hit = rows.both.flat_slice(n, n);
  }
  rows.samples = samples;
  if (output.rank() == 2) {
    kernels::class_loss(kind_, output, labels, grad_scale, rows.loss, rows.hit, grad);
    return;
  }
  // (N, ..., C) as (R, C) rows; a sample's P positions share its grad_scale (the
  // mean over its positions, as Keras' losses reduce them).
  const int64_t positions = samples > 0 ? n / samples : 1;
  Tensor grad_rows = grad ? grad->reshaped({n, classes}) : Tensor();
  kernels::class_loss(kind_, output.reshaped({n, classes}), labels, grad_scale / static_cast<float>(positions),
                      rows.loss, rows.hit, grad ? &grad_rows : nullptr);
}

void Loss::add_stats(const LossRows& rows, LossStats& stats) {
  const Tensor both = rows.both.to_host();  // one copy (and on a GPU one wait) for both halves
  const int64_t n = both.numel() / 2;
  const float* loss = both.data();
  const float* hit = both.data() + n;
  for (int64_t i = 0; i < n; ++i) {
    stats.loss_sum += loss[i];
    stats.correct += hit[i] > 0.5f;
  }
  stats.count += rows.samples;
  stats.tokens += n;
}

void Loss::compute(const Tensor& output, const std::vector<int32_t>& labels, LossStats& stats, Tensor* grad,
                   float grad_scale) const {
  LossRows rows;
  compute(output, labels_tensor(labels, output.device()), grad, grad_scale, rows);
  add_stats(rows, stats);
}

const std::vector<LossType>& loss_types() {
  using kernels::LossKind;
  const std::vector<config::KeyDoc> logits = {{"from_logits", "false: the model outputs probabilities (clipped at 1e-7 as Keras does); true: logits"}};
  auto cross_entropy = [](const LossSpec& spec) {
    return std::make_unique<Loss>(spec.from_logits ? LossKind::kCrossEntropyLogits : LossKind::kCrossEntropyProbabilities);
  };
  static const std::vector<LossType> table = {
      {"sparse_categorical_crossentropy", "cross-entropy against integer labels", logits, cross_entropy, true},
      {"categorical_crossentropy", "cross-entropy against the labels' one-hot form", logits, cross_entropy, true},
      {"mse", "mean squared error against the one-hot labels", {},
       [](const LossSpec&) { return std::make_unique<Loss>(LossKind::kMse); }},
  };
  return table;
}

const LossType& loss_type(const std::string& name) { return config::find_entry(loss_types(), name, "loss"); }

const LossType& loss_type_of(const LossSpec& spec) {
  // A spec made in code without a type takes Keras' default loss for class labels.
  return spec.type ? *spec.type : loss_type("sparse_categorical_crossentropy");
}

std::unique_ptr<Loss> make_loss(const LossSpec& spec) { return loss_type_of(spec).make(spec); }

LossSpec read_loss_spec(const config::Value& value) {
  LossSpec loss;
  const std::vector<std::string> names = config::entry_names(loss_types());
  loss.path = value.path().empty() ? "loss" : value.path();
  if (value.is_string()) {
    loss.type = &loss_type(value.to_choice(names, "loss"));
    return loss;
  }
  if (!value.is_object())
    value.fail(str("expected a loss name (one of ", join(names, ", "),
                   ") or an object such as {\"type\": \"mse\"}, got ", value.describe()));
  config::Section r(value, "the loss");
  loss.type = &loss_type(r.require_choice("type", names, "loss"));
  r.set_what(str("the ", loss.type->name, " loss"));
  r.expect_keys(config::declared_keys({"type"}, loss.type->keys), [](const std::string& key) {
    return key == "from_logits" ? std::string("from_logits applies only to the crossentropy losses") : std::string();
  });
  if (!loss.type->keys.empty()) loss.from_logits = r.get_bool("from_logits", loss.from_logits);  // the crossentropies
  r.finish();
  return loss;
}

namespace {

// The activation a layer spec ends with (linear for a layer without one).
kernels::Activation last_activation(const LayerSpec& layer) {
  switch (layer.kind()) {
    case LayerKind::kDense: return layer.options_as<DenseOptions>().activation;
    case LayerKind::kConv2D: return layer.options_as<Conv2DOptions>().activation;
    case LayerKind::kResidual: return layer.options_as<ResidualOptions>().activation;
    case LayerKind::kActivation: return layer.options_as<ActivationOptions>().activation;
    default: return kernels::Activation::kLinear;
  }
}

}  // namespace

std::string softmax_logits_warning(const ModelSpec& model, const LossSpec& loss) {
  if (!loss.from_logits || model.layers.empty()) return "";
  const LayerSpec& last = model.layers.back();
  if (last_activation(last) != kernels::Activation::kSoftmax) return "";
  return str(loss.path, ": ", loss_type_of(loss).name, " has from_logits true, but the model's output layer ",
             last.path, " (", last.type_name(), last.name.empty() ? "" : str(" '", last.name, "'"),
             ") applies a softmax, so the loss is given probabilities, not logits (Keras warns the same); remove "
             "the softmax (the usual way: the loss applies it) or set from_logits to false");
}

}  // namespace dtrain::nn
