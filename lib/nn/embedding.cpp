// Embedding, keras_hub's TokenAndPositionEmbedding and PositionEmbedding: token
// ids (held as floats, (T)) to rows of a table, (T, D), on kernels::embedding_*
// (a gather forward, a scatter-add backward). Position tables go through the
// same kernels with the ids 0..T-1. Their registry entries (layer_registry.h)
// close the file.
#include <algorithm>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/sequence_layers.h"

namespace dtrain::nn {
namespace {

// Keras' "uniform" initializer: U(-0.05, 0.05).
void keras_uniform(Tensor& t, Rng& rng) {
  float* p = t.data();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(rng.uniform(-0.05, 0.05));
}

// The input of an embedding: token ids, one per position.
void require_tokens(const LayerSpec& spec, const std::string& name, const Shape& input) {
  if (input.size() != 1)
    throw ConfigError(str(layer_where(spec, name), ": expects token ids (time,), got ", shape_str(input),
                          "; it must be the model's first layer, with input_shape [sequence_length]"));
}

// The ids 0..T-1 for each of n samples, (n, T), on `device`; kept in `cache` while n holds.
const Tensor& position_ids(Tensor& cache, int64_t n, int64_t t, const Device& device) {
  if (cache.defined() && cache.dim(0) == n) return cache;
  Tensor host({n, t});
  for (int64_t i = 0; i < n * t; ++i) host.data()[i] = static_cast<float>(i % t);
  cache = host.to(device);
  return cache;
}

// A position past the table's rows, when generating.
void check_position(const std::string& layer, int64_t position, int64_t rows) {
  if (position >= rows)
    throw ConfigError(str(layer, ": position ", position, " is past sequence_length ", rows,
                          "; generate at most that many tokens in all (prompt included)"));
}

// Keeps rows [index x V / parts, ...) of `table` (V, D) (its value cut out of
// the whole one, its gradient new) and says which part it is.
VocabularyPart split_table(Param& table, const VocabularySplit& split, const std::string& layer) {
  const int64_t vocabulary = table.value.dim(0), d = table.value.dim(1);
  DT_CHECK(split.parts >= 1 && split.index >= 0 && split.index < split.parts && split.all_reduce, "a vocabulary split");
  DT_CHECK(vocabulary % split.parts == 0, layer, ": a vocabulary of ", vocabulary, " over ", split.parts, " parts");
  DT_CHECK(table.value.device().is_cpu(), "an embedding is split before it is placed");
  const int64_t part = vocabulary / split.parts;
  Tensor rows({part, d});
  std::copy_n(table.value.data() + split.index * part * d, part * d, rows.data());
  table = {table.name, rows, Tensor({part, d})};
  return {split, split.index * part, vocabulary};
}

}  // namespace

void Embedding::split(const VocabularySplit& split) {
  DT_CHECK(!part_.on(), name(), " is split once");
  part_ = split_table(table_, split, name());
}

void TokenAndPositionEmbedding::split(const VocabularySplit& split) {
  DT_CHECK(!part_.on(), name(), " is split once");
  part_ = split_table(tokens_, split, name());
}

Embedding::Embedding(const std::string& name, const Shape& input, int64_t input_dim, int64_t output_dim)
    : Layer(name, "Embedding", input, {input[0], output_dim}) {
  table_ = {name + "/embeddings", Tensor({input_dim, output_dim}), Tensor({input_dim, output_dim})};
}

void Embedding::initialize(Rng& rng) { keras_uniform(table_.value, rng); }

LayerBuffers Embedding::buffers(int64_t rows, DType dtype, bool need_dx) const {
  return {output_bytes(rows, DType::kF32), need_dx ? input_bytes(rows, DType::kF32) : 0};
}

Tensor Embedding::forward(const Tensor& x, const StepContext& ctx) {
  ids_ = x;
  Tensor& y = reuse(y_, x.dim(0), output_shape());
  if (!part_.on()) {
    kernels::embedding_forward(x, table_.value, y);
    return y;
  }
  kernels::embedding_forward_part(x, table_.value, part_.first, part_.vocabulary, y);
  part_.split.all_reduce(y);  // each id's row from the part that holds it
  return y;
}

Tensor Embedding::backward(const Tensor& dy, bool need_dx) {
  if (part_.on()) kernels::embedding_backward_part(ids_, dy, part_.first, table_.grad);
  else kernels::embedding_backward(ids_, dy, table_.grad);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, dy.dim(0), input_shape());
  dx.zero();  // token ids are not differentiable
  return dx;
}

Tensor Embedding::decode(const Tensor& ids, int64_t) {
  DT_CHECK(!part_.on(), name(), ": generation runs on a whole model (dtrain generate loads the checkpoint whole)");
  Tensor y({ids.numel(), output_shape()[1]}, device());
  kernels::embedding_forward(ids, table_.value, y);
  return y;
}

TokenAndPositionEmbedding::TokenAndPositionEmbedding(const std::string& name, const Shape& input,
                                                     const TokenAndPositionEmbeddingOptions& o)
    : Layer(name, "TokenAndPositionEmbedding", input, {input[0], o.embedding_dim}) {
  const int64_t d = o.embedding_dim;
  tokens_ = {name + "/token_embedding/embeddings", Tensor({o.vocabulary_size, d}), Tensor({o.vocabulary_size, d})};
  positions_ = {name + "/position_embedding/embeddings", Tensor({o.sequence_length, d}),
                Tensor({o.sequence_length, d})};
}

void TokenAndPositionEmbedding::initialize(Rng& rng) {
  keras_uniform(tokens_.value, rng);
  keras_uniform(positions_.value, rng);
}

LayerBuffers TokenAndPositionEmbedding::buffers(int64_t rows, DType dtype, bool need_dx) const {
  const int64_t out = output_bytes(rows, DType::kF32);
  return {out * 2 + input_bytes(rows, DType::kF32), need_dx ? input_bytes(rows, DType::kF32) : 0};
}

Tensor TokenAndPositionEmbedding::forward(const Tensor& x, const StepContext& ctx) {
  const int64_t n = x.dim(0);
  ids_ = x;
  Tensor& y = reuse(y_, n, output_shape());
  Tensor& positions = reuse(scratch_, n, output_shape());
  if (part_.on()) {
    kernels::embedding_forward_part(x, tokens_.value, part_.first, part_.vocabulary, y);
    part_.split.all_reduce(y);  // each id's row from the part that holds it
  } else {
    kernels::embedding_forward(x, tokens_.value, y);
  }
  kernels::embedding_forward(position_ids(position_ids_, n, input_shape()[0], device()), positions_.value, positions);
  kernels::axpy(1.0f, positions, y);
  return y;
}

Tensor TokenAndPositionEmbedding::backward(const Tensor& dy, bool need_dx) {
  const int64_t n = dy.dim(0);
  if (part_.on()) kernels::embedding_backward_part(ids_, dy, part_.first, tokens_.grad);
  else kernels::embedding_backward(ids_, dy, tokens_.grad);
  // Rows of the position table past T get no gradient (they are zeroed by the kernel).
  kernels::embedding_backward(position_ids(position_ids_, n, input_shape()[0], device()), dy, positions_.grad);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, n, input_shape());
  dx.zero();
  return dx;
}

Tensor TokenAndPositionEmbedding::decode(const Tensor& ids, int64_t position) {
  DT_CHECK(!part_.on(), name(), ": generation runs on a whole model (dtrain generate loads the checkpoint whole)");
  const int64_t n = ids.numel(), d = output_shape()[1];
  check_position(name(), position, positions_.value.dim(0));
  Tensor y({n, d}, device());
  kernels::embedding_forward(ids, tokens_.value, y);
  const Tensor row = positions_.value.flat_slice(position * d, d);
  for (int64_t i = 0; i < n; ++i) {
    Tensor yi = y.flat_slice(i * d, d);
    kernels::axpy(1.0f, row, yi);
  }
  return y;
}

PositionEmbedding::PositionEmbedding(const std::string& name, const Shape& input, int64_t sequence_length)
    : Layer(name, "PositionEmbedding", input, input) {
  const int64_t d = input[1];
  positions_ = {name + "/embeddings", Tensor({sequence_length, d}), Tensor({sequence_length, d})};
}

void PositionEmbedding::initialize(Rng& rng) {
  glorot_uniform(positions_.value, positions_.value.dim(0), positions_.value.dim(1), rng);
}

LayerBuffers PositionEmbedding::buffers(int64_t rows, DType dtype, bool need_dx) const {
  return {output_bytes(rows, DType::kF32), need_dx ? input_bytes(rows, DType::kF32) : 0};
}

Tensor PositionEmbedding::forward(const Tensor& x, const StepContext& ctx) {
  const int64_t n = x.dim(0);
  Tensor& y = reuse(y_, n, output_shape());
  kernels::embedding_forward(position_ids(position_ids_, n, input_shape()[0], device()), positions_.value, y);
  return y;
}

Tensor PositionEmbedding::backward(const Tensor& dy, bool need_dx) {
  const int64_t n = dy.dim(0);
  kernels::embedding_backward(position_ids(position_ids_, n, input_shape()[0], device()), dy, positions_.grad);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, n, input_shape());
  dx.zero();  // the output does not depend on the input's values
  return dx;
}

Tensor PositionEmbedding::decode(const Tensor& x, int64_t position) {
  const int64_t n = x.dim(0), d = input_shape()[1];
  check_position(name(), position, positions_.value.dim(0));
  Tensor y({n, d}, device());
  const Tensor row = positions_.value.flat_slice(position * d, d);
  for (int64_t i = 0; i < n; ++i) {
    Tensor yi = y.flat_slice(i * d, d);
    yi.copy_from(row);
  }
  return y;
}

InputVocabulary input_vocabulary(const ModelSpec& spec) {
  if (spec.layers.empty()) return {};
  const LayerSpec& first = spec.layers.front();
  if (first.kind() == LayerKind::kEmbedding)
    return {first.options_as<EmbeddingOptions>().input_dim, first.path + ".input_dim"};
  if (first.kind() == LayerKind::kTokenAndPositionEmbedding)
    return {first.options_as<TokenAndPositionEmbeddingOptions>().vocabulary_size, first.path + ".vocabulary_size"};
  return {};
}

// The registry entries (layer_registry.h).
const LayerType& embedding_layer_type() {
  static const LayerType type{
      "Embedding",
      "token ids `(time,)` -> rows of a table `(time, output_dim)`, initialised U(-0.05, 0.05) (Keras' "
      "`uniform`); the model's first layer",
      {{"input_dim", "the vocabulary: ids are in [0, input_dim) (required, >= 1)"},
       {"output_dim", "the embedding's width (required, >= 1)"}},
      [](config::Section& r) {
        auto o = std::make_shared<EmbeddingOptions>();
        o->input_dim = r.require_int("input_dim", 1);
        o->output_dim = r.require_int("output_dim", 1);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        const auto& o = spec.options_as<EmbeddingOptions>();
        require_tokens(spec, ctx.name, input);
        return std::make_unique<Embedding>(ctx.name, input, o.input_dim, o.output_dim);
      },
      nullptr};
  return type;
}

const LayerType& token_and_position_embedding_layer_type() {
  static const LayerType type{
      "TokenAndPositionEmbedding",
      "keras_hub's: a token table plus a learned position table, `(time,)` -> `(time, embedding_dim)`; "
      "the model's first layer",
      {{"vocabulary_size", "ids are in [0, vocabulary_size) (required, >= 1)"},
       {"sequence_length", "the longest sequence: positions 0 .. sequence_length - 1 (required, >= 1)"},
       {"embedding_dim", "the embedding's width (required, >= 1)"}},
      [](config::Section& r) {
        auto o = std::make_shared<TokenAndPositionEmbeddingOptions>();
        o->vocabulary_size = r.require_int("vocabulary_size", 1);
        o->sequence_length = r.require_int("sequence_length", 1);
        o->embedding_dim = r.require_int("embedding_dim", 1);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        const auto& o = spec.options_as<TokenAndPositionEmbeddingOptions>();
        require_tokens(spec, ctx.name, input);
        if (input[0] > o.sequence_length)
          throw ConfigError(str(layer_where(spec, ctx.name), ": sequences of ", input[0],
                                " tokens but sequence_length ", o.sequence_length,
                                "; make sequence_length at least the model's input length"));
        return std::make_unique<TokenAndPositionEmbedding>(ctx.name, input, o);
      },
      nullptr};
  return type;
}

const LayerType& position_embedding_layer_type() {
  static const LayerType type{
      "PositionEmbedding",
      "keras_hub's: a learned position table, glorot_uniform; `(time, features)` -> the table's first `time` "
      "rows (the input's values are not used); add it to its input with a `Residual`, as a Keras model does with "
      "`Add`",
      {{"sequence_length", "the longest sequence: positions 0 .. sequence_length - 1 (required, >= 1)"}},
      [](config::Section& r) {
        auto o = std::make_shared<PositionEmbeddingOptions>();
        o->sequence_length = r.require_int("sequence_length", 1);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        const auto& o = spec.options_as<PositionEmbeddingOptions>();
        if (input.size() != 2)
          throw ConfigError(str(layer_where(spec, ctx.name), ": expects a sequence (time, features), got ",
                                shape_str(input), "; put it after an Embedding"));
        if (input[0] > o.sequence_length)
          throw ConfigError(str(layer_where(spec, ctx.name), ": sequences of ", input[0],
                                " positions but sequence_length ", o.sequence_length,
                                "; make sequence_length at least the model's input length"));
        return std::make_unique<PositionEmbedding>(ctx.name, input, o.sequence_length);
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
