// Layers and Sequential: shapes and errors from specs, Keras names, deterministic
// init, and a finite-difference check of every layer's backward pass in a model.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/error.h"
#include "nn/layer_registry.h"
#include "nn/layers.h"
#include "nn/losses.h"
#include "nn/sequential.h"
#include "unit/finite_difference.h"
#include "unit/tensor_checks.h"

using namespace dtrain;
using nn::LayerSpec;
using testing::relative_distance;

namespace {

// Specs built in code, as the parser would leave them (the parser's own checks are
// tested in tests/unit/config): each type's options struct with its defaults.
std::shared_ptr<nn::LayerOptions> default_options(const std::string& type) {
  if (type == "Dense") return std::make_shared<nn::DenseOptions>();
  if (type == "Conv2D") return std::make_shared<nn::Conv2DOptions>();
  if (type == "MaxPooling2D" || type == "AveragePooling2D") return std::make_shared<nn::Pool2DOptions>();
  if (type == "Dropout") return std::make_shared<nn::DropoutOptions>();
  if (type == "BatchNormalization") return std::make_shared<nn::BatchNormalizationOptions>();
  if (type == "Activation") return std::make_shared<nn::ActivationOptions>();
  if (type == "Residual") return std::make_shared<nn::ResidualOptions>();
  return std::make_shared<nn::LayerOptions>();
}

LayerSpec layer(const std::string& type, int index) {
  LayerSpec s;
  s.type = nn::find_layer_type(type);
  REQUIRE(s.type != nullptr);
  s.path = "model.layers[" + std::to_string(index) + "]";
  s.options = default_options(type);
  return s;
}

// The options of a spec made by layer() (a non-const object), to set them.
template <class T>
T& edit(LayerSpec& s) {
  return const_cast<T&>(s.options_as<T>());
}

kernels::Activation act_of(const std::string& name) {
  for (auto a : {kernels::Activation::kLinear, kernels::Activation::kRelu, kernels::Activation::kSigmoid,
                 kernels::Activation::kTanh, kernels::Activation::kSoftmax})
    if (nn::activation_name(a) == name) return a;
  FAIL("no activation " << name);
  return kernels::Activation::kLinear;
}

LayerSpec dense(int units, int index, const std::string& act = "linear") {
  LayerSpec s = layer("Dense", index);
  edit<nn::DenseOptions>(s).units = units;
  edit<nn::DenseOptions>(s).activation = act_of(act);
  return s;
}

LayerSpec conv(int filters, int k, int index, const std::string& padding = "valid", int stride = 1) {
  LayerSpec s = layer("Conv2D", index);
  auto& o = edit<nn::Conv2DOptions>(s);
  o.filters = filters;
  o.kernel_size[0] = o.kernel_size[1] = k;
  o.strides[0] = o.strides[1] = stride;
  o.same_padding = padding == "same";
  return s;
}

nn::ModelSpec model_spec(Shape input, std::vector<LayerSpec> layers) {
  nn::ModelSpec m;
  m.input_shape = input;
  m.layers = std::move(layers);
  return m;
}

std::string config_error(const nn::ModelSpec& spec) {
  try {
    nn::Sequential model(spec, 1);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

Tensor random_tensor(Shape shape, uint64_t seed) {
  Tensor t(std::move(shape));
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(rng.uniform(-1, 1));
  return t;
}

}  // namespace

TEST_CASE("the CNN from the README builds with Keras' shapes, names and parameter counts") {
  LayerSpec pool = layer("MaxPooling2D", 1);
  edit<nn::Pool2DOptions>(pool).strides[0] = edit<nn::Pool2DOptions>(pool).strides[1] = 2;
  LayerSpec drop = layer("Dropout", 4);
  edit<nn::DropoutOptions>(drop).rate = 0.25;
  const auto spec = model_spec({28, 28, 1}, {conv(32, 3, 0, "valid"), pool, layer("Flatten", 2),
                                             dense(64, 3, "relu"), drop, dense(10, 5)});
  nn::Sequential model(spec, 1);
  const auto& layers = model.layers();
  CHECK(layers[0]->name() == "conv2d");
  CHECK(layers[0]->output_shape() == Shape{26, 26, 32});
  CHECK(layers[1]->name() == "max_pooling2d");
  CHECK(layers[1]->output_shape() == Shape{13, 13, 32});
  CHECK(layers[2]->output_shape() == Shape{5408});
  CHECK(layers[3]->name() == "dense");
  CHECK(layers[5]->name() == "dense_1");
  CHECK(model.output_shape() == Shape{10});
  // Keras: 320 + 346176 + 650
  CHECK(model.count_params(true) == 320 + 346176 + 650);
  CHECK(model.params()[0]->name == "conv2d/kernel");
  CHECK(model.summary().find("max_pooling2d (MaxPooling2D)") != std::string::npos);
}

TEST_CASE("same padding keeps ceil(size/stride) and valid padding shrinks") {
  nn::Sequential same(model_spec({7, 7, 3}, {conv(4, 3, 0, "same", 2)}), 1);
  CHECK(same.output_shape() == Shape{4, 4, 4});
  nn::Sequential valid(model_spec({7, 7, 3}, {conv(4, 3, 0, "valid", 2)}), 1);
  CHECK(valid.output_shape() == Shape{3, 3, 4});
}

TEST_CASE("shape mismatches name the layer and both shapes") {
  const std::string dense_on_image = config_error(model_spec({28, 28, 1}, {conv(8, 3, 0), dense(10, 1)}));
  CHECK_THAT(dense_on_image, Catch::Contains("model.layers[1]") && Catch::Contains("Dense") &&
                                 Catch::Contains("(26, 26, 8)") && Catch::Contains("Flatten"));
  const std::string conv_on_flat = config_error(model_spec({784}, {conv(8, 3, 0)}));
  CHECK_THAT(conv_on_flat, Catch::Contains("model.layers[0]") && Catch::Contains("(784,)"));
  const std::string kernel_too_big = config_error(model_spec({4, 4, 1}, {conv(8, 5, 0)}));
  CHECK_THAT(kernel_too_big, Catch::Contains("5x5") && Catch::Contains("(4, 4, 1)") && Catch::Contains("same"));
}

TEST_CASE("initial parameters are glorot-uniform, zero biases, and a function of the seed") {
  const auto spec = model_spec({20}, {dense(30, 0, "relu"), dense(5, 1)});
  nn::Sequential a(spec, 7), b(spec, 7), c(spec, 8);
  CHECK(a.params_sha256() == b.params_sha256());
  CHECK(a.params_sha256() != c.params_sha256());
  const Tensor& k = a.params()[0]->value;
  const double limit = std::sqrt(6.0 / (20 + 30));
  double max_abs = 0;
  for (int64_t i = 0; i < k.numel(); ++i) max_abs = std::max(max_abs, double(std::fabs(k.data()[i])));
  CHECK(max_abs <= limit);
  CHECK(max_abs > 0.8 * limit);
  const Tensor& bias = a.params()[1]->value;
  for (int64_t i = 0; i < bias.numel(); ++i) REQUIRE(bias.data()[i] == 0.0f);
}

TEST_CASE("inputs of the right size are viewed in the model's input shape") {
  nn::Sequential model(model_spec({12}, {dense(3, 0)}), 1);
  const Tensor images = random_tensor({2, 2, 2, 3}, 5);
  const Tensor out = model.forward(images, {});
  CHECK(out.shape() == Shape{2, 3});
}

// Finite differences through a whole model: loss(params + e) - loss(params - e).
void check_gradients(const nn::ModelSpec& spec, const Shape& input, double tolerance) {
  nn::Sequential model(spec, 3);
  nn::LossSpec ls;
  ls.from_logits = true;
  auto loss = nn::make_loss(ls);
  const int64_t n = input[0];
  const Tensor x = random_tensor(input, 11);
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < n; ++i) labels.push_back(static_cast<int32_t>(i % model.output_shape()[0]));
  const nn::StepContext ctx{true, 5, 0};  // same dropout mask on every call

  auto loss_value = [&] {
    nn::LossStats s;
    loss->compute(model.forward(x, ctx), labels, s, nullptr, 0);
    return s.loss_sum / n;
  };
  const Tensor out = model.forward(x, ctx);
  Tensor grad(out.shape());
  nn::LossStats s;
  loss->compute(out, labels, s, &grad, 1.0f / n);
  model.backward(grad);

  for (nn::Param* p : model.trainable_params()) {
    Rng pick(99);
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t i = static_cast<int64_t>(pick.below(p->value.numel()));
      const double numeric = testing::central_difference(p->value.data()[i], loss_value);
      INFO(p->name << "[" << i << "]: analytic " << p->grad.data()[i] << ", numeric " << numeric);
      REQUIRE(p->grad.data()[i] == Approx(numeric).margin(tolerance).epsilon(0.05));
    }
  }
}

TEST_CASE("gradients of a dense model with every activation match finite differences") {
  check_gradients(model_spec({6}, {dense(8, 0, "relu"), dense(7, 1, "tanh"), dense(6, 2, "sigmoid"),
                                   dense(5, 3, "softmax"), dense(4, 4)}),
                  {5, 6}, 2e-3);
}

// Max pooling is left out: a finite difference that moves an input across another
// makes the argmax jump (the kernel test checks max pooling's routing exactly).
TEST_CASE("gradients through conv, pooling, batch norm, dropout and activation layers") {
  LayerSpec bn = layer("BatchNormalization", 2);
  LayerSpec act = layer("Activation", 3);
  edit<nn::ActivationOptions>(act).activation = act_of("tanh");
  LayerSpec avg = layer("AveragePooling2D", 5);
  auto& avg_options = edit<nn::Pool2DOptions>(avg);
  avg_options.pool_size[0] = avg_options.pool_size[1] = 2;
  avg_options.strides[0] = avg_options.strides[1] = 1;
  avg_options.same_padding = true;
  LayerSpec drop = layer("Dropout", 6);
  edit<nn::DropoutOptions>(drop).rate = 0.3;
  check_gradients(model_spec({9, 9, 2}, {conv(4, 3, 0, "same"), bn, act, conv(3, 2, 4, "valid", 1), avg,
                                         drop, layer("GlobalAveragePooling2D", 7), dense(3, 8)}),
                  {4, 9, 9, 2}, 2e-3);
}

TEST_CASE("batch normalization updates moving statistics in training and uses them in inference") {
  LayerSpec bn = layer("BatchNormalization", 0);
  edit<nn::BatchNormalizationOptions>(bn).momentum = 0.5;
  nn::Sequential model(model_spec({3}, {bn}), 1);
  Tensor x({4, 3});
  for (int i = 0; i < 12; ++i) x.data()[i] = static_cast<float>(i);  // column means 4.5, 5.5, 6.5
  model.forward(x, {true, 0, 0});
  const auto params = model.params();  // gamma, beta, moving_mean, moving_variance
  REQUIRE(params[2]->name == "batch_normalization/moving_mean");
  CHECK(params[2]->value.data()[0] == Approx(0.5 * 4.5));
  CHECK(params[3]->value.data()[0] == Approx(0.5 * 1.0 + 0.5 * 11.25));  // biased variance of 0,3,6,9
  const Tensor y = model.forward(x, {false, 0, 0});
  CHECK(y.data()[0] == Approx((0 - 2.25) / std::sqrt(6.125 + 1e-3)).epsilon(1e-4));
}

namespace {

LayerSpec residual(int index, std::vector<LayerSpec> layers, std::vector<LayerSpec> shortcut,
                   const std::string& act) {
  LayerSpec s = layer("Residual", index);
  edit<nn::ResidualOptions>(s).layers = std::move(layers);
  edit<nn::ResidualOptions>(s).shortcut = std::move(shortcut);
  edit<nn::ResidualOptions>(s).activation = act_of(act);
  return s;
}

LayerSpec activation(const std::string& act, int index) {
  LayerSpec s = layer("Activation", index);
  edit<nn::ActivationOptions>(s).activation = act_of(act);
  return s;
}

// conv -> identity block (conv, bn, tanh, conv) -> downsampling block whose
// shortcut is a strided 1x1 conv and batch norm -> pooling -> dense.
nn::ModelSpec small_resnet(const std::string& block_activation, double dropout_rate) {
  LayerSpec drop = layer("Dropout", 2);
  edit<nn::DropoutOptions>(drop).rate = dropout_rate;
  const LayerSpec identity_block =
      residual(1, {conv(4, 3, 0, "same"), layer("BatchNormalization", 1), activation("tanh", 2), drop,
                   conv(4, 3, 3, "same")},
               {}, block_activation);
  const LayerSpec down_block = residual(2, {conv(6, 3, 0, "same", 2), layer("BatchNormalization", 1)},
                                        {conv(6, 1, 0, "valid", 2), layer("BatchNormalization", 1)},
                                        block_activation);
  return model_spec({6, 6, 3}, {conv(4, 3, 0, "same"), identity_block, down_block,
                                layer("GlobalAveragePooling2D", 3), dense(3, 4)});
}

}  // namespace

TEST_CASE("residual blocks name their layers like Keras and own their params") {
  nn::Sequential model(small_resnet("relu", 0.0), 1);
  const auto& layers = model.layers();
  REQUIRE(layers.size() == 5);
  CHECK(layers[1]->name() == "residual");
  CHECK(layers[1]->type() == "Residual");
  CHECK(layers[1]->output_shape() == Shape{6, 6, 4});
  CHECK(layers[2]->name() == "residual_1");
  CHECK(layers[2]->output_shape() == Shape{3, 3, 6});
  std::vector<std::string> names;
  for (nn::Param* p : layers[2]->params()) names.push_back(p->name);
  // The main branch's params, then the shortcut's; trainable before state within a layer.
  const std::vector<std::string> want = {
      "conv2d_3/kernel", "conv2d_3/bias", "batch_normalization_1/gamma", "batch_normalization_1/beta",
      "batch_normalization_1/moving_mean", "batch_normalization_1/moving_variance",
      "conv2d_4/kernel", "conv2d_4/bias", "batch_normalization_2/gamma", "batch_normalization_2/beta",
      "batch_normalization_2/moving_mean", "batch_normalization_2/moving_variance"};
  CHECK(names == want);
  // conv 3*3*3*4+4, block 1: 2*(3*3*4*4+4) + bn 4*4, block 2: 3*3*4*6+6 + 1*1*4*6+6 + 2 bn 2*4*6, dense 6*3+3
  CHECK(model.count_params(false) == 112 + (296 + 16) + (222 + 30 + 48) + 21);
  const std::string summary = model.summary();
  CHECK(summary.find("\nresidual_1 (Residual)") != std::string::npos);
  CHECK(summary.find("\n  conv2d_4 (Conv2D)") != std::string::npos);  // the shortcut's conv, under its block
  CHECK(summary.find("residual_1 (Residual)") < summary.find("  conv2d_4 (Conv2D)"));
}

TEST_CASE("a residual block adds its branches and applies its activation") {
  // y = tanh(relu(x) + x) with the identity shortcut.
  nn::Sequential model(model_spec({4}, {residual(0, {activation("relu", 0)}, {}, "tanh")}), 1);
  Tensor x({1, 4});
  const float in[4] = {-2.0f, -0.5f, 0.25f, 1.5f};
  std::copy(in, in + 4, x.data());
  const Tensor y = model.forward(x, {});
  for (int i = 0; i < 4; ++i) CHECK(y.data()[i] == Approx(std::tanh(std::max(in[i], 0.0f) + in[i])));
}

TEST_CASE("gradients through residual blocks, both branches and the input, match finite differences") {
  // The first conv's gradients pass through both blocks' input gradients.
  check_gradients(small_resnet("tanh", 0.3), {3, 6, 6, 3}, 2e-3);
}

TEST_CASE("a residual block whose branches end in different shapes names both and the fix") {
  const std::string err =
      config_error(model_spec({6, 6, 3}, {residual(0, {conv(8, 3, 0, "same")}, {}, "relu")}));
  CHECK_THAT(err, Catch::Contains("model.layers[0] (Residual 'residual')") && Catch::Contains("(6, 6, 8)") &&
                      Catch::Contains("(the identity) passes on (6, 6, 3)") &&
                      Catch::Contains("\"shortcut\" such as [{\"type\": \"Conv2D\", \"filters\": 8, "
                                      "\"kernel_size\": 1, \"strides\": 1, \"padding\": \"same\"}]"));
  // 7x7 through a stride-2 "same" conv is 4x4: the suggested stride rounds up to 2.
  const std::string odd = config_error(model_spec({7, 7, 3}, {residual(0, {conv(8, 3, 0, "same", 2)}, {}, "relu")}));
  CHECK_THAT(odd, Catch::Contains("\"strides\": 2"));
  const std::string strided = config_error(
      model_spec({6, 6, 3}, {residual(0, {conv(3, 3, 0, "same", 2)}, {conv(3, 1, 0, "valid", 1)}, "relu")}));
  CHECK_THAT(strided, Catch::Contains("(3, 3, 3)") && Catch::Contains("ends in (6, 6, 3)"));
}

TEST_CASE("an explicit layer name that is another layer's automatic name is an error") {
  LayerSpec named = dense(4, 1);
  named.name = "dense_1";  // the automatic name of the block's second Dense
  const std::string err = config_error(
      model_spec({4}, {dense(4, 0), residual(1, {named, dense(4, 1)}, {}, "relu")}));
  CHECK_THAT(err, Catch::Contains("two layers are named 'dense_1'"));
  LayerSpec empty = residual(0, {}, {}, "relu");
  CHECK_THAT(config_error(model_spec({4}, {empty})), Catch::Contains("a Residual block needs at least one layer"));
}

// ---- mixed precision (train.precision mixed_bfloat16) ----

namespace {

// The CNN of the README with a BatchNormalization and a softmax head: layers
// with bfloat16 kernels compute in it, the others in float32.
nn::ModelSpec mixed_cnn_spec(DType dtype) {
  LayerSpec pool = layer("MaxPooling2D", 2);
  edit<nn::Pool2DOptions>(pool).strides[0] = edit<nn::Pool2DOptions>(pool).strides[1] = 2;
  LayerSpec drop = layer("Dropout", 5);
  edit<nn::DropoutOptions>(drop).rate = 0.25;
  LayerSpec c = conv(8, 3, 0, "same");
  edit<nn::Conv2DOptions>(c).activation = kernels::Activation::kRelu;
  nn::ModelSpec spec = model_spec({10, 10, 3}, {c, layer("BatchNormalization", 1), pool, layer("Flatten", 3),
                                                dense(16, 4, "relu"), drop, dense(5, 6, "softmax")});
  spec.compute_dtype = dtype;
  return spec;
}


}  // namespace

TEST_CASE("a bfloat16 model computes in bfloat16 where a layer can, and matches float32 closely", "[bf16]") {
  nn::Sequential f32(mixed_cnn_spec(DType::kF32), 7), bf16(mixed_cnn_spec(DType::kBF16), 7);
  std::vector<std::string> dtypes;
  for (auto& l : bf16.layers()) dtypes.push_back(dtype_name(l->compute_dtype()));
  // Conv2D, pooling, Flatten, Dense relu and Dropout in bfloat16; batch norm and
  // the softmax head in float32, as Keras' mixed policy keeps them.
  CHECK(dtypes == std::vector<std::string>{"bfloat16", "float32", "bfloat16", "bfloat16", "bfloat16", "bfloat16",
                                           "float32"});
  for (auto& l : f32.layers()) CHECK(l->compute_dtype() == DType::kF32);
  // float16 on the CPU: no layer has a CPU kernel for it (only Flatten, which
  // computes nothing, passes it on); on a GPU Dense, Dropout and the
  // activations do (tests/gpu).
  nn::Sequential f16(mixed_cnn_spec(DType::kF16), 7);
  for (auto& l : f16.layers()) CHECK(l->compute_dtype() == (l->type() == "Flatten" ? DType::kF16 : DType::kF32));

  const Tensor x = random_tensor({6, 10, 10, 3}, 3);
  const nn::StepContext ctx{true, 11, 0};
  const Tensor yf = f32.forward(x, ctx), yb = bf16.forward(x, ctx);
  REQUIRE(yb.dtype() == DType::kF32);  // the loss sees float32
  CHECK(relative_distance(yb, yf) < 0.02);
  CHECK(relative_distance(yb, yf) > 0.0);  // it did compute in bfloat16

  Tensor g = random_tensor(yf.shape(), 4);
  f32.backward(g);
  bf16.backward(g);
  const auto pf = f32.trainable_params(), pb = bf16.trainable_params();
  REQUIRE(pf.size() == pb.size());
  for (size_t i = 0; i < pf.size(); ++i) {
    INFO(pb[i]->name);
    CHECK(pb[i]->grad.dtype() == DType::kF32);  // gradients and values stay float32
    CHECK(pb[i]->value.dtype() == DType::kF32);
    CHECK(relative_distance(pb[i]->grad, pf[i]->grad) < 0.05);
  }
}

TEST_CASE("a bfloat16 model that begins with layers without parameters runs backward (the shipped MLP)", "[bf16]") {
  // Flatten then Dense, as configs/fashion_mnist_mlp.json: Flatten computes in
  // bfloat16 and needs no input gradient, so none may be converted for it.
  nn::ModelSpec spec = model_spec({4, 4, 1}, {layer("Flatten", 0), dense(8, 1, "relu"), dense(3, 2)});
  spec.compute_dtype = DType::kBF16;
  nn::Sequential model(spec, 7);
  REQUIRE(model.layers()[0]->compute_dtype() == DType::kBF16);
  const Tensor x = random_tensor({5, 4, 4, 1}, 3);
  const Tensor y = model.forward(x, {true, 11, 0});
  std::vector<size_t> done;
  model.backward(random_tensor(y.shape(), 4), [&](size_t layer) { done.push_back(layer); });
  CHECK(done == std::vector<size_t>{2, 1, 0});
  for (const nn::Param* p : model.trainable_params()) {
    INFO(p->name);
    double norm = 0;
    for (int64_t i = 0; i < p->grad.numel(); ++i) norm += std::fabs(p->grad.data()[i]);
    CHECK(norm > 0.0);
  }
  // A pipeline stage asks for the input gradient: through Flatten, in float32.
  const Tensor dx = model.backward(random_tensor(y.shape(), 5), {}, /*input_grad=*/true);
  CHECK(dx.dtype() == DType::kF32);
  CHECK(dx.shape() == x.shape());
}

TEST_CASE("the bfloat16 weight copies are remade when the params may have changed", "[bf16]") {
  nn::Sequential model(mixed_cnn_spec(DType::kBF16), 7);
  const Tensor x = random_tensor({2, 10, 10, 3}, 3);
  const nn::StepContext eval{false, 1, 0};
  const Tensor before = model.forward(x, eval).clone();
  for (nn::Param* p : model.trainable_params())
    if (p->name == "dense/kernel") p->value.fill(0.0f);
  nn::StepContext same_update = eval;
  same_update.weights_changed = false;  // a later micro-batch of one update: the copies stand
  CHECK(relative_distance(model.forward(x, same_update), before) == 0.0);
  // Told the params may have changed, the forward pass sees the zeroed kernel:
  // with dense's outputs all zero, every sample gets the same softmax row.
  const Tensor after = model.forward(x, eval);
  CHECK(relative_distance(after, before) > 0.01);
  for (int64_t j = 0; j < after.dim(1); ++j) CHECK(after.data()[j] == after.data()[after.dim(1) + j]);
}
