// The layers of a transformer language model, with Keras' names and defaults:
// Embedding, keras_hub's TokenAndPositionEmbedding, LayerNormalization,
// MultiHeadAttention (self-attention, optionally causal) and keras_hub's
// TransformerDecoder block (built from them and Residual). Inputs are token
// ids held as floats, (T), or sequences of features, (T, D); Dense, Dropout
// and Activation work on sequences too (over the last axis).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/layer.h"
#include "nn/layers.h"

namespace dtrain::nn {

struct EmbeddingOptions : LayerOptions {
  int64_t input_dim = 0;   // the vocabulary
  int64_t output_dim = 0;  // the embedding's width
};

struct TokenAndPositionEmbeddingOptions : LayerOptions {
  int64_t vocabulary_size = 0, sequence_length = 0, embedding_dim = 0;
};

struct PositionEmbeddingOptions : LayerOptions {
  int64_t sequence_length = 0;  // rows of the position table
};

struct LayerNormalizationOptions : LayerOptions {
  double epsilon = 1e-3;
  bool center = true, scale = true;
};

struct MultiHeadAttentionOptions : LayerOptions {
  int64_t num_heads = 0, key_dim = 0;
  int64_t value_dim = 0;     // 0: key_dim
  int64_t output_shape = 0;  // 0: the input's features
  bool use_bias = true;
  bool use_causal_mask = false;
  double dropout = 0.0;  // on the attention weights, while training
};

struct TransformerDecoderOptions : LayerOptions {
  int64_t intermediate_dim = 0, num_heads = 0;
  double dropout = 0.0;
  Activation activation = Activation::kRelu;
  double layer_norm_epsilon = 1e-5;
  bool normalize_first = false;  // keras_hub's default; true is the pre-norm (GPT-2) block
};

// Tensor parallelism's split of an embedding by vocabulary: this task keeps
// table rows [index x V / parts, ...) (cut out of the whole table's initial
// values); its forward looks up the ids in its rows (zeros for the others) and
// sums the parts over the tasks with `all_reduce`, so every task has the whole
// embedding. Its backward needs no exchange (each part's rows get their ids'
// gradients). Before the model is placed.
struct VocabularySplit {
  int parts = 1, index = 0;
  std::function<void(Tensor&)> all_reduce;
};
// A split table's part: how it was split, its first row and the whole vocabulary.
struct VocabularyPart {
  VocabularySplit split;
  int64_t first = 0, vocabulary = 0;
  bool on() const { return static_cast<bool>(split.all_reduce); }
};

// A table of input_dim rows of output_dim: (T) token ids -> (T, output_dim).
// Initialised U(-0.05, 0.05), Keras' "uniform".
class Embedding : public Layer {
 public:
  Embedding(const std::string& name, const Shape& input, int64_t input_dim, int64_t output_dim);
  void split(const VocabularySplit& split);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;  // ids have no gradient: zeros
  std::vector<Param*> params() override { return {&table_}; }
  void initialize(Rng& rng) override;
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  Tensor decode(const Tensor& ids, int64_t position) override;

 private:
  Param table_;
  Tensor ids_, y_, dx_;
  VocabularyPart part_;
};

// keras_hub's TokenAndPositionEmbedding: a token table (vocabulary_size, D) and
// a learned position table (sequence_length, D), added: (T) -> (T, D), T <= sequence_length.
class TokenAndPositionEmbedding : public Layer {
 public:
  TokenAndPositionEmbedding(const std::string& name, const Shape& input, const TokenAndPositionEmbeddingOptions& o);
  // The token table splits (the positions stay whole: added after the sum).
  void split(const VocabularySplit& split);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  std::vector<Param*> params() override { return {&tokens_, &positions_}; }
  void initialize(Rng& rng) override;
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  Tensor decode(const Tensor& ids, int64_t position) override;

 protected:
  void move_extras(const Device& device) override { position_ids_ = Tensor(); }

 private:
  Param tokens_, positions_;
  Tensor ids_, position_ids_, y_, scratch_, dx_;
  VocabularyPart part_;
};

// keras_hub's PositionEmbedding: a learned table (sequence_length, D), glorot_uniform.
// (T, D) -> the table's first T rows, the same for every sample: the input's
// values are not used (their gradient is zero), only its shape. A Keras model adds
// it to its input with an Add, which dtrain reads as a Residual around this layer.
class PositionEmbedding : public Layer {
 public:
  PositionEmbedding(const std::string& name, const Shape& input, int64_t sequence_length);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  std::vector<Param*> params() override { return {&positions_}; }
  void initialize(Rng& rng) override;
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  Tensor decode(const Tensor& x, int64_t position) override;

 protected:
  void move_extras(const Device& device) override { position_ids_ = Tensor(); }

 private:
  Param positions_;
  Tensor position_ids_, y_, dx_;
};

// Normalises each position over the last axis: y = (x - mean) / sqrt(var + eps) * gamma + beta.
class LayerNormalization : public Layer {
 public:
  LayerNormalization(const std::string& name, const Shape& input, float epsilon, bool center, bool scale);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  std::vector<Param*> params() override;
  void initialize(Rng& rng) override;
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  Tensor decode(const Tensor& x, int64_t position) override;

 private:
  float epsilon_;
  bool center_, scale_;
  Param gamma_, beta_;
  Tensor x_, y_, mean_, rstd_, dx_;
};

// Self-attention of num_heads heads over a (T, D) sequence, Keras' weights:
// query/key/value kernels (D, heads, key_dim) (value: value_dim) with biases
// (heads, key_dim), attention_output kernel (heads, value_dim, out) and bias
// (out). Scores scaled by 1/sqrt(key_dim); causal: position t sees 0..t.
// The attention itself is kernels::attention_* (blocked on the CPU: no (T, T)
// matrix is kept, only each row's log-sum-exp).
class MultiHeadAttention : public Layer {
 public:
  // `dropout_stream` tells this layer's dropout masks from other layers' (its index in the model).
  MultiHeadAttention(const std::string& name, const Shape& input, const MultiHeadAttentionOptions& o,
                     uint64_t dropout_stream = 0);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  std::vector<Param*> params() override;
  void initialize(Rng& rng) override;
  // Its products (the four projections) in bfloat16 on the CPU; the attention
  // itself stays float32.
  bool supports_product_dtype(DType dtype) const override;
  void refresh_compute_weights() override;
  int64_t weight_copy_bytes(DType dtype) const override;  // the four kernels' copies
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  // The keys and values of every position so far are kept (the KV cache): a
  // position attends to them and adds its own. Causal attention only.
  void start_decoding(int64_t batch, int64_t positions) override;
  Tensor decode(const Tensor& x, int64_t position) override;
  // Megatron's split by heads over `parts` tasks (strategy/parallel/tensor_parallel.h):
  // this task keeps heads [index x heads/parts, ...) of the query, key and value
  // projections (their kernels' and biases' slices) and the matching rows of the
  // output projection; its output is the group's sum of the parts' (`all_reduce`,
  // the output bias added on index 0 before it), and its dx is summed the same
  // way. Before the layer is placed; attention dropout is not split (refused).
  void split(int parts, int index, std::function<void(Tensor&)> all_reduce);
  bool is_split() const { return static_cast<bool>(all_reduce_); }

 private:
  struct Projection {  // a kernel (in, heads, dim) and bias (heads, dim) as matmul operands
    Param kernel, bias;
    Tensor copy;  // the kernel in the product dtype (mixed precision)
  };
  // The kernel as the matmul's (in, out) operand: in the product dtype, or (decoding) its float32 values.
  Tensor product_kernel(const Projection& p, int64_t in) const;
  void project(const Tensor& x_rows, const Tensor& kernel, Projection& p, Tensor& out, bool with_bias = true);
  int64_t heads_, key_dim_, value_dim_;
  bool use_bias_;
  float dropout_;
  uint64_t dropout_stream_;
  kernels::AttentionParams attention_;  // the last forward pass's, dropout seed included
  Projection query_, key_, value_, output_;
  Tensor x_, q_, k_, v_, o_, lse_, y_;
  Tensor key_cache_, value_cache_;  // (batch, positions, heads, dim) while decoding
  Tensor do_, dq_, dk_, dv_, dx_, dx_part_;
  Tensor xp_, op_, dyp_, dqp_, dkp_, dvp_;  // x, o, dy, dq, dk, dv in the product dtype
  std::function<void(Tensor&)> all_reduce_;  // split(): the group's sum
  bool output_bias_here_ = true;             // split(): on index 0 only
};

// keras_hub's TransformerDecoder without cross-attention: a causal
// self-attention block and a feed-forward block (Dense(intermediate_dim,
// activation) -> Dense(D)), each with a residual connection, dropout and a
// LayerNormalization: before each block when normalize_first (pre-norm, as in
// GPT-2), else after each residual sum (keras_hub's default). Its layers are
// named <name>/self_attention, <name>/self_attention_layer_norm,
// <name>/feedforward_intermediate_dense, ... as keras_hub names them.
class TransformerDecoder : public Layer {
 public:
  TransformerDecoder(const std::string& name, const Shape& input, std::vector<std::unique_ptr<Layer>> stack);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  std::vector<Param*> params() override;
  std::vector<Layer*> children() override;
  void initialize(Rng& rng) override;
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  void start_decoding(int64_t batch, int64_t positions) override;
  Tensor decode(const Tensor& x, int64_t position) override;

 protected:
  void move_extras(const Device& device) override;

 private:
  std::vector<std::unique_ptr<Layer>> stack_;  // blocks and norms, in order
};

// The layers of a TransformerDecoder for a (T, D) input (exposed for tests).
std::vector<std::unique_ptr<Layer>> transformer_decoder_stack(const std::string& name, const Shape& input,
                                                              const TransformerDecoderOptions& o,
                                                              uint64_t layer_index);

}  // namespace dtrain::nn
