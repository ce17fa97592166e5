// The transformer layers in a Sequential model: shapes, Keras' and keras_hub's
// weight names, causality (a later token cannot change an earlier output),
// finite-difference checks of every parameter's gradient through embeddings,
// both kinds of decoder block, layer norm and a Dense over sequences, and the
// configuration errors that name the layer and the fix.
#include <catch2/catch.hpp>
#include <cmath>

#include "config/section.h"
#include "core/error.h"
#include "nn/layer_registry.h"
#include "nn/model_spec.h"
#include "nn/sequence_layers.h"
#include "nn/sequential.h"
#include "unit/finite_difference.h"
#include "unit/tensor_checks.h"

using namespace dtrain;
using nn::LayerSpec;
using testing::random_tensor;
using testing::relative_distance;

namespace {

template <class Options>
LayerSpec spec_of(const std::string& type, int index, const Options& options) {
  LayerSpec s;
  s.type = nn::find_layer_type(type);
  REQUIRE(s.type != nullptr);
  s.path = "model.layers[" + std::to_string(index) + "]";
  s.options = std::make_shared<Options>(options);
  return s;
}

LayerSpec embedding(int64_t vocabulary, int64_t length, int64_t width) {
  nn::TokenAndPositionEmbeddingOptions o;
  o.vocabulary_size = vocabulary;
  o.sequence_length = length;
  o.embedding_dim = width;
  return spec_of("TokenAndPositionEmbedding", 0, o);
}

LayerSpec decoder(int index, int64_t intermediate, int64_t heads, kernels::Activation act, bool pre_norm,
                  double dropout) {
  nn::TransformerDecoderOptions o;
  o.intermediate_dim = intermediate;
  o.num_heads = heads;
  o.activation = act;
  o.normalize_first = pre_norm;
  o.dropout = dropout;
  return spec_of("TransformerDecoder", index, o);
}

LayerSpec dense(int index, int64_t units) {
  nn::DenseOptions o;
  o.units = units;
  return spec_of("Dense", index, o);
}

nn::ModelSpec gpt(int64_t vocabulary, int64_t t) {
  nn::ModelSpec m;
  m.input_shape = {t};
  m.layers = {embedding(vocabulary, 16, 8),
              decoder(1, 16, 2, kernels::Activation::kGelu, true, 0.0),
              decoder(2, 12, 4, kernels::Activation::kGeluTanh, false, 0.2),
              spec_of("LayerNormalization", 3, nn::LayerNormalizationOptions{}),
              dense(4, vocabulary)};
  return m;
}

Tensor token_ids(int64_t n, int64_t t, int64_t vocabulary, uint64_t seed) {
  Tensor ids({n, t});
  Rng rng(seed);
  for (int64_t i = 0; i < ids.numel(); ++i) ids.data()[i] = static_cast<float>(rng.below(vocabulary));
  return ids;
}

}  // namespace

TEST_CASE("a small GPT: shapes and keras_hub's weight names") {
  nn::Sequential model(gpt(11, 12), 1);
  CHECK(model.output_shape() == Shape{12, 11});
  std::vector<std::string> names;
  for (nn::Param* p : model.trainable_params()) names.push_back(p->name);
  REQUIRE(names.size() >= 6);
  CHECK(names[0] == "token_and_position_embedding/token_embedding/embeddings");
  CHECK(names[1] == "token_and_position_embedding/position_embedding/embeddings");
  CHECK(names[2] == "transformer_decoder/self_attention_layer_norm/gamma");
  CHECK(names[4] == "transformer_decoder/self_attention/query/kernel");
  const auto has = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) != names.end(); };
  CHECK(has("transformer_decoder/self_attention/attention_output/bias"));
  CHECK(has("transformer_decoder_1/feedforward_intermediate_dense/kernel"));
  CHECK(has("transformer_decoder_1/feedforward_layer_norm/beta"));
  CHECK(has("layer_normalization/gamma"));
  // Embeddings 11*8 + 16*8; block 1: 2 norms 2*16, attention 4*(8*8+8), ffn 8*16+16 + 16*8+8;
  // block 2 the same with 12; the final norm 16 and dense 8*11+11.
  const int64_t attention = 4 * (64 + 8);
  CHECK(model.count_params(false) == (88 + 128) + (32 + attention + 144 + 136) + (32 + attention + 108 + 104) + 16 + 99);
}

TEST_CASE("causal attention: changing a later token leaves every earlier position's output unchanged") {
  nn::Sequential model(gpt(11, 12), 2);
  Tensor ids = token_ids(2, 12, 11, 3);
  const Tensor before = model.forward(ids, {}).clone();
  ids.data()[7] = ids.data()[7] == 3.0f ? 4.0f : 3.0f;  // sample 0, position 7
  const Tensor after = model.forward(ids, {});
  for (int64_t pos = 0; pos < 12; ++pos) {
    double change = 0;
    for (int64_t c = 0; c < 11; ++c) change += std::fabs(after.data()[pos * 11 + c] - before.data()[pos * 11 + c]);
    INFO("position " << pos);
    if (pos < 7) CHECK(change == 0.0);
    else CHECK(change > 1e-6);
  }
}

TEST_CASE("gradients through embeddings, both decoder blocks, layer norm and a sequence Dense match finite differences") {
  nn::Sequential model(gpt(11, 12), 4);
  // Tables of U(-1, 1) rather than U(-0.05, 0.05): a step of 1e-2 is then small
  // against the spread the layer norms divide by (smooth activations: relu's
  // kink would make finite differences jump).
  for (nn::Param* p : model.trainable_params())
    if (p->name.find("embeddings") != std::string::npos)
      for (int64_t i = 0; i < p->value.numel(); ++i) p->value.data()[i] *= 20.0f;
  const Tensor ids = token_ids(3, 12, 11, 5);
  const Tensor w = random_tensor({3, 12, 11}, 6);  // the objective: sum(w * logits)
  const nn::StepContext ctx{true, 5, 0};            // the same dropout masks on every call
  auto objective = [&] {
    const Tensor y = model.forward(ids, ctx);
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.data()[i]) * w.data()[i];
    return s;
  };
  model.forward(ids, ctx);
  model.backward(w);
  for (nn::Param* p : model.trainable_params()) {
    Rng pick(99);
    for (int trial = 0; trial < 4; ++trial) {
      // Embedding rows of ids that occur, so the gradient is not trivially 0.
      int64_t i = static_cast<int64_t>(pick.below(p->value.numel()));
      if (p->name.find("token_embedding") != std::string::npos)
        i = static_cast<int64_t>(ids.data()[trial]) * 8 + trial;
      const double numeric = testing::central_difference(p->value.data()[i], objective);
      INFO(p->name << "[" << i << "]: analytic " << p->grad.data()[i] << ", numeric " << numeric);
      CHECK(p->grad.data()[i] == Approx(numeric).margin(5e-3).epsilon(0.03));
    }
  }
}

TEST_CASE("a Dense over a sequence is the same Dense at every position") {
  nn::ModelSpec m;
  m.input_shape = {3, 4};
  m.layers = {dense(0, 5)};
  nn::Sequential seq(m, 7);
  nn::ModelSpec flat = m;
  flat.input_shape = {4};
  nn::Sequential one(flat, 7);  // the same seed: the same kernel
  const Tensor x = random_tensor({2, 3, 4}, 8);
  const Tensor y = seq.forward(x, {});
  CHECK(y.shape() == Shape{2, 3, 5});
  const Tensor rows = one.forward(x.reshaped({6, 4}), {});
  testing::require_close(y.reshaped({6, 5}), rows, 0, 0);
}

TEST_CASE("transformer layer errors name the layer and the fix") {
  auto error_of = [](nn::ModelSpec m) -> std::string {
    try {
      nn::Sequential model(m, 1);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  nn::ModelSpec heads = gpt(11, 12);
  heads.layers[1] = decoder(1, 16, 3, kernels::Activation::kRelu, true, 0.0);
  CHECK_THAT(error_of(heads), Catch::Contains("model.layers[1] (TransformerDecoder 'transformer_decoder')") &&
                                  Catch::Contains("num_heads 3 does not divide the 8 features"));
  nn::ModelSpec too_long = gpt(11, 20);  // sequence_length 16
  CHECK_THAT(error_of(too_long), Catch::Contains("sequences of 20 tokens but sequence_length 16"));
  nn::ModelSpec flat;
  flat.input_shape = {8};
  nn::MultiHeadAttentionOptions mha;
  mha.num_heads = 2;
  mha.key_dim = 4;
  flat.layers = {spec_of("MultiHeadAttention", 0, mha)};
  CHECK_THAT(error_of(flat), Catch::Contains("expects a sequence (time, features), got (8,)"));
  nn::ModelSpec not_first;
  not_first.input_shape = {4, 3};
  not_first.layers = {embedding(11, 16, 8)};
  CHECK_THAT(error_of(not_first), Catch::Contains("expects token ids (time,), got (4, 3)"));
}

TEST_CASE("decoding one position at a time with the key/value cache gives the whole window's outputs") {
  nn::Sequential model(gpt(11, 12), 9);
  const Tensor ids = token_ids(2, 12, 11, 10);
  const Tensor window = model.forward(ids, {}).clone();  // (2, 12, 11)
  model.start_decoding(2, 12);
  for (int64_t t = 0; t < 12; ++t) {
    Tensor step({2});
    for (int64_t b = 0; b < 2; ++b) step.data()[b] = ids.data()[b * 12 + t];
    const Tensor out = model.decode(step, t);  // (2, 11)
    REQUIRE(out.shape() == Shape{2, 11});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 11; ++c) {
        INFO("position " << t << ", sample " << b << ", logit " << c);
        CHECK(out.data()[b * 11 + c] == Approx(window.data()[(b * 12 + t) * 11 + c]).margin(1e-4));
      }
  }
}

// The GPT a Keras Functional model becomes (keras_model.cpp): Embedding, a
// Residual around keras_hub's PositionEmbedding (x + positions), attention and
// feed-forward in Residual blocks. The position table's gradient matches finite
// differences, the input's gradient through PositionEmbedding is the identity
// path's alone, and decoding with the cache gives the window's outputs.
TEST_CASE("PositionEmbedding in a Residual: gradients and cached decoding") {
  const config::Document doc(R"({"input_shape": [10], "layers": [
      {"type": "Embedding", "input_dim": 7, "output_dim": 8},
      {"type": "Residual", "layers": [{"type": "PositionEmbedding", "sequence_length": 12}]},
      {"type": "Residual", "layers": [{"type": "LayerNormalization", "epsilon": 1e-5},
                                      {"type": "MultiHeadAttention", "num_heads": 2, "key_dim": 4,
                                       "use_causal_mask": true}]},
      {"type": "Dense", "units": 7}]})",
                             "model.json");
  nn::Sequential model(nn::read_model_spec(doc.root()), 3);
  nn::Param* positions = nullptr;
  for (nn::Param* p : model.trainable_params())
    if (p->name == "position_embedding/embeddings") positions = p;
  REQUIRE(positions != nullptr);
  CHECK(positions->value.shape() == Shape{12, 8});
  const Tensor ids = token_ids(2, 10, 7, 8);
  const Tensor w = random_tensor({2, 10, 7}, 9);
  auto objective = [&] {
    const Tensor y = model.forward(ids, {});
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.data()[i]) * w.data()[i];
    return s;
  };
  model.forward(ids, {});
  model.backward(w);
  for (const int64_t i : {0, 13, 79}) {  // rows 0, 1 and 9: positions the window uses
    INFO("positions[" << i << "]");
    CHECK(positions->grad.data()[i] ==
          Approx(testing::central_difference(positions->value.data()[i], objective)).margin(5e-3).epsilon(0.03));
  }
  for (int64_t i = 80; i < 96; ++i) CHECK(positions->grad.data()[i] == 0.0f);  // rows 10, 11: unused

  const Tensor window = model.forward(ids, {}).clone();
  model.start_decoding(2, 10);
  for (int64_t t = 0; t < 10; ++t) {
    Tensor step({2});
    for (int64_t b = 0; b < 2; ++b) step.data()[b] = ids.data()[b * 10 + t];
    const Tensor out = model.decode(step, t);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 7; ++c) {
        INFO("position " << t << ", sample " << b << ", logit " << c);
        CHECK(out.data()[b * 7 + c] == Approx(window.data()[(b * 10 + t) * 7 + c]).margin(1e-4));
      }
  }
}

TEST_CASE("PositionEmbedding errors name the layer and the fix") {
  auto build = [](const std::string& layers, const std::string& input) {
    const config::Document doc(R"({"input_shape": )" + input + R"(, "layers": [)" + layers + "]}", "model.json");
    nn::Sequential model(nn::read_model_spec(doc.root()), 1);
  };
  CHECK_THROWS_WITH(build(R"({"type": "PositionEmbedding", "sequence_length": 4})", "[4]"),
                    Catch::Matchers::Contains("expects a sequence (time, features)") &&
                        Catch::Matchers::Contains("after an Embedding"));
  CHECK_THROWS_WITH(build(R"({"type": "Embedding", "input_dim": 5, "output_dim": 3},
                           {"type": "PositionEmbedding", "sequence_length": 4})",
                          "[6]"),
                    Catch::Matchers::Contains("sequences of 6 positions but sequence_length 4"));
}

namespace {


// Each layer inside the model (a block's children too), depth first.
void all_layers(nn::Layer* layer, std::vector<nn::Layer*>& out) {
  out.push_back(layer);
  for (nn::Layer* child : layer->children()) all_layers(child, out);
}

}  // namespace

TEST_CASE("in mixed_bfloat16 a GPT's float32 layers take their products in bfloat16, close to float32", "[bf16]") {
  nn::ModelSpec f32_spec = gpt(11, 12), bf16_spec = gpt(11, 12);
  bf16_spec.compute_dtype = DType::kBF16;
  nn::Sequential f32(f32_spec, 5), bf16(bf16_spec, 5);
  std::vector<nn::Layer*> layers;
  for (auto& l : bf16.layers()) all_layers(l.get(), layers);
  int products = 0;
  for (nn::Layer* l : layers) {
    INFO(l->name());
    const bool casts = l->type() == "Dense" || l->type() == "MultiHeadAttention";
    if (l->compute_dtype() == DType::kBF16) {
      CHECK(l->product_dtype() == DType::kF32);  // a bfloat16 layer's operands are bfloat16 already
    } else if (casts) {
      CHECK(l->product_dtype() == DType::kBF16);  // gelu's Dense, attention
      ++products;
    } else if (l->children().empty()) {
      CHECK(l->product_dtype() == DType::kF32);  // layer norm, embeddings, dropout: no products to cast
    }
  }
  CHECK(products == 2 * 3);  // per block: attention and the two feed-forward Dense layers
  // The blocks' weight copies: attention's 4 kernels and the 2 Dense kernels, 2 bytes each.
  const nn::Layer& block = *bf16.layers()[1];
  CHECK(block.weight_copy_bytes(DType::kF32) == 2 * (4 * 8 * 8 + 8 * 16 + 16 * 8));
  CHECK(f32.layers()[1]->weight_copy_bytes(DType::kF32) == 0);

  const Tensor ids = token_ids(3, 12, 11, 2);
  const nn::StepContext ctx{true, 11, 0};
  const Tensor yf = f32.forward(ids, ctx), yb = bf16.forward(ids, ctx);
  REQUIRE(yb.dtype() == DType::kF32);
  CHECK(relative_distance(yb, yf) < 0.02);  // the bfloat16 layer tests' tolerance
  CHECK(relative_distance(yb, yf) > 0.0);   // the products were bfloat16
  const Tensor g = random_tensor(yf.shape(), 4);
  f32.backward(g);
  bf16.backward(g);
  const auto pf = f32.trainable_params(), pb = bf16.trainable_params();
  REQUIRE(pf.size() == pb.size());
  auto norm = [](const Tensor& t) {
    double s = 0;
    for (int64_t i = 0; i < t.numel(); ++i) s += double(t.data()[i]) * t.data()[i];
    return std::sqrt(s);
  };
  for (size_t i = 0; i < pf.size(); ++i) {
    INFO(pb[i]->name);
    CHECK(pb[i]->grad.dtype() == DType::kF32);
    if (pb[i]->name.ends_with("key/bias")) {
      // Zero in exact arithmetic (softmax ignores a shift shared by a row's
      // scores): only rounding is left, small next to the key kernel's gradient.
      CHECK(norm(pb[i]->grad) < 1e-2 * norm(pb[i - 1]->grad));
      continue;
    }
    CHECK(relative_distance(pb[i]->grad, pf[i]->grad) < 0.05);
  }
}
