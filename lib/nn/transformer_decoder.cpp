// TransformerDecoder: keras_hub's decoder block without cross-attention, made
// of the layers dtrain has: two Residual blocks (causal self-attention, then
// the feed-forward pair of Dense layers), each with its dropout, and
// LayerNormalization before each block (normalize_first, GPT-2's pre-norm) or
// after each residual sum (keras_hub's default). The stack runs in order
// forward and in reverse backward, like a small Sequential.
// Its registry entry (layer_registry.h) closes the file.
#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/sequence_layers.h"

namespace dtrain::nn {

std::vector<std::unique_ptr<Layer>> transformer_decoder_stack(const std::string& name, const Shape& input,
                                                              const TransformerDecoderOptions& o,
                                                              uint64_t layer_index) {
  const int64_t d = input[1];
  const auto epsilon = static_cast<float>(o.layer_norm_epsilon);
  const auto rate = static_cast<float>(o.dropout);
  auto norm = [&](const std::string& part) {
    return std::make_unique<LayerNormalization>(name + "/" + part, input, epsilon, true, true);
  };
  // Each dropout's masks derive from (the block's index, which dropout).
  auto dropout = [&](const std::string& part, uint64_t which) {
    return std::make_unique<Dropout>(name + "/" + part, input, rate, hash_u64(layer_index, which));
  };
  MultiHeadAttentionOptions attention;
  attention.num_heads = o.num_heads;
  attention.key_dim = d / o.num_heads;
  attention.use_causal_mask = true;
  attention.dropout = o.dropout;  // keras_hub drops attention weights too

  Residual::Branch attention_branch, feedforward_branch;
  if (o.normalize_first) attention_branch.push_back(norm("self_attention_layer_norm"));
  attention_branch.push_back(std::make_unique<MultiHeadAttention>(name + "/self_attention", input, attention,
                                                                  hash_u64(layer_index, 3)));
  attention_branch.push_back(dropout("self_attention_dropout", 1));
  if (o.normalize_first) feedforward_branch.push_back(norm("feedforward_layer_norm"));
  feedforward_branch.push_back(std::make_unique<Dense>(name + "/feedforward_intermediate_dense", input,
                                                       o.intermediate_dim, o.activation, true));
  feedforward_branch.push_back(std::make_unique<Dense>(
      name + "/feedforward_output_dense", Shape{input[0], o.intermediate_dim}, d, Activation::kLinear, true));
  feedforward_branch.push_back(dropout("feedforward_dropout", 2));

  std::vector<std::unique_ptr<Layer>> stack;
  stack.push_back(std::make_unique<Residual>(name + "/self_attention_block", input, std::move(attention_branch),
                                             Residual::Branch{}, Activation::kLinear));
  if (!o.normalize_first) stack.push_back(norm("self_attention_layer_norm"));
  stack.push_back(std::make_unique<Residual>(name + "/feedforward_block", input, std::move(feedforward_branch),
                                             Residual::Branch{}, Activation::kLinear));
  if (!o.normalize_first) stack.push_back(norm("feedforward_layer_norm"));
  return stack;
}

TransformerDecoder::TransformerDecoder(const std::string& name, const Shape& input,
                                       std::vector<std::unique_ptr<Layer>> stack)
    : Layer(name, "TransformerDecoder", input, input), stack_(std::move(stack)) {}

Tensor TransformerDecoder::forward(const Tensor& x, const StepContext& ctx) { return forward_branch(stack_, x, ctx); }

Tensor TransformerDecoder::backward(const Tensor& dy, bool need_dx) { return backward_branch(stack_, dy, need_dx); }

std::vector<Param*> TransformerDecoder::params() {
  std::vector<Param*> out;
  for (auto& layer : stack_)
    for (Param* p : layer->params()) out.push_back(p);
  return out;
}

std::vector<Layer*> TransformerDecoder::children() {
  std::vector<Layer*> out;
  for (auto& layer : stack_) out.push_back(layer.get());
  return out;
}

void TransformerDecoder::initialize(Rng& rng) {
  // Each part draws from its own stream, as Sequential's layers do.
  const uint64_t seed = rng.next_u64();
  for (size_t i = 0; i < stack_.size(); ++i) {
    Rng child(hash_u64(seed, i));
    stack_[i]->initialize(child);
  }
}

LayerBuffers TransformerDecoder::buffers(int64_t rows, DType, bool need_dx) const {
  LayerBuffers b;
  for (size_t i = 0; i < stack_.size(); ++i) {
    const LayerBuffers c = stack_[i]->buffers(rows, DType::kF32, need_dx || i > 0);
    b.forward += c.forward;
    b.backward += c.backward;
  }
  return b;
}

void TransformerDecoder::start_decoding(int64_t batch, int64_t positions) {
  for (auto& layer : stack_) layer->start_decoding(batch, positions);
}

Tensor TransformerDecoder::decode(const Tensor& x, int64_t position) {
  Tensor h = x;
  for (auto& layer : stack_) h = layer->decode(h, position);
  return h;
}

void TransformerDecoder::move_extras(const Device& device) {
  for (auto& layer : stack_) layer->set_device(device);
}

const LayerType& transformer_decoder_layer_type() {
  static const LayerType type{
      "TransformerDecoder",
      "keras_hub's decoder block (no cross-attention): causal self-attention and a feed-forward pair of Dense "
      "layers, each with a residual connection, dropout and LayerNormalization; `(time, features)` in and out",
      {{"intermediate_dim", "the feed-forward layer's width (required, >= 1)"},
       {"num_heads", "attention heads (required; must divide the features: key_dim = features / num_heads)"},
       {"dropout", "0: the share dropped while training, on the attention weights and after each block, as "
                   "keras_hub"},
       {"activation", "the feed-forward activation: `relu` (default), `gelu`, `gelu_approximate`, ..."},
       {"layer_norm_epsilon", "1e-05"},
       {"normalize_first", "false: normalise after each residual sum (keras_hub's default); true: before each "
                           "block (pre-norm, GPT-2's)"}},
      [](config::Section& r) {
        auto o = std::make_shared<TransformerDecoderOptions>();
        o->intermediate_dim = r.require_int("intermediate_dim", 1);
        o->num_heads = r.require_int("num_heads", 1);
        o->dropout = r.get_double("dropout", o->dropout, config::kFraction);
        o->activation = get_activation(r, "activation", o->activation);
        o->layer_norm_epsilon = r.get_double("layer_norm_epsilon", o->layer_norm_epsilon, config::kPositive);
        o->normalize_first = r.get_bool("normalize_first", o->normalize_first);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        const auto& o = spec.options_as<TransformerDecoderOptions>();
        if (input.size() != 2)
          throw ConfigError(str(layer_where(spec, ctx.name), ": expects a sequence (time, features), got ",
                                shape_str(input), "; put an Embedding or TokenAndPositionEmbedding before it"));
        if (input[1] % o.num_heads != 0)
          throw ConfigError(str(layer_where(spec, ctx.name), ": num_heads ", o.num_heads, " does not divide the ",
                                input[1], " features; each head gets features / num_heads"));
        return std::make_unique<TransformerDecoder>(ctx.name, input,
                                                    transformer_decoder_stack(ctx.name, input, o, ctx.layer_index));
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
