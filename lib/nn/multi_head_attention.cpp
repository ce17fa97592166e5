// MultiHeadAttention (self-attention): the query, key and value projections
// are matmuls over the (N * T, D) rows with the Keras kernels (D, heads, dim)
// viewed as (D, heads * dim), so q, k, v come out as (N, T, heads, dim);
// kernels::attention_forward combines them; the output projection maps
// (N * T, heads * value_dim) back to the features. Backward runs the same
// steps in reverse: the output projection's gradients, attention_backward,
// then each projection's, and dx is the sum of the three input gradients.
// Dropout on the attention weights happens inside the attention kernels, with
// masks from (job seed, layer, step), remade in the backward pass.
// Its registry entry (layer_registry.h) closes the file.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "nn/layer_factory.h"
#include "nn/layer_registry.h"
#include "nn/sequence_layers.h"

namespace dtrain::nn {
namespace {

// Keras' glorot_uniform for a kernel of rank 3 (EinsumDense's): the leading
// axis counts as the receptive field, fan_in = shape[1] * shape[0], fan_out = shape[2] * shape[0].
void glorot_rank3(Tensor& t, Rng& rng) {
  glorot_uniform(t, t.dim(1) * t.dim(0), t.dim(2) * t.dim(0), rng);
}

// Activations as matmul rows of `cols` features.
Tensor as_rows(const Tensor& t, int64_t cols) { return t.reshaped({t.numel() / cols, cols}); }
// A Keras kernel as the matmul's (in, out) operand: (D, heads, dim) -> (D, heads * dim),
// (heads, dim, out) -> (heads * dim, out).
Tensor matrix(const Tensor& kernel, int64_t in) { return kernel.reshaped({in, kernel.numel() / in}); }

}  // namespace

MultiHeadAttention::MultiHeadAttention(const std::string& name, const Shape& input,
                                       const MultiHeadAttentionOptions& o, uint64_t dropout_stream)
    : Layer(name, "MultiHeadAttention", input, {input[0], o.output_shape > 0 ? o.output_shape : input[1]}),
      heads_(o.num_heads),
      key_dim_(o.key_dim),
      value_dim_(o.value_dim > 0 ? o.value_dim : o.key_dim),
      use_bias_(o.use_bias),
      dropout_(static_cast<float>(o.dropout)),
      dropout_stream_(dropout_stream) {
  const int64_t d = input[1], out = output_shape()[1];
  attention_ = {heads_, static_cast<float>(1.0 / std::sqrt(static_cast<double>(key_dim_))), o.use_causal_mask};
  auto projection = [&](const std::string& part, Shape kernel, Shape bias) {
    Projection p;
    p.kernel = {name + "/" + part + "/kernel", Tensor(kernel), Tensor(kernel)};
    if (use_bias_) p.bias = {name + "/" + part + "/bias", Tensor(bias), Tensor(bias)};
    return p;
  };
  query_ = projection("query", {d, heads_, key_dim_}, {heads_, key_dim_});
  key_ = projection("key", {d, heads_, key_dim_}, {heads_, key_dim_});
  value_ = projection("value", {d, heads_, value_dim_}, {heads_, value_dim_});
  output_ = projection("attention_output", {heads_, value_dim_, out}, {out});
}

std::vector<Param*> MultiHeadAttention::params() {
  std::vector<Param*> out;
  for (Projection* p : {&query_, &key_, &value_, &output_}) {
    out.push_back(&p->kernel);
    if (use_bias_) out.push_back(&p->bias);
  }
  return out;
}

void MultiHeadAttention::initialize(Rng& rng) {
  for (Projection* p : {&query_, &key_, &value_, &output_}) {
    glorot_rank3(p->kernel.value, rng);
    if (use_bias_) p->bias.value.zero();
  }
}

bool MultiHeadAttention::supports_product_dtype(DType dtype) const {
  return dtype == DType::kF32 || (dtype == DType::kBF16 && device().is_cpu());
}

void MultiHeadAttention::refresh_compute_weights() {
  for (Projection* p : {&query_, &key_, &value_, &output_}) refresh_copy(p->kernel, p->copy);
}

int64_t MultiHeadAttention::weight_copy_bytes(DType) const {
  if (product_dtype() == DType::kF32) return 0;
  int64_t n = 0;
  for (const Projection* p : {&query_, &key_, &value_, &output_}) n += p->kernel.value.numel();
  return n * static_cast<int64_t>(dtype_size(product_dtype()));
}

LayerBuffers MultiHeadAttention::buffers(int64_t rows, DType, bool need_dx) const {
  // Kept: q, k, v, the attention's output (N, T, heads, dim), each row's
  // log-sum-exp (N, heads, T) and y; no (T, T) scores. Backward: their gradients and dx.
  // With products in bfloat16 also x's and o's copies, and dy's, dq's, dk's, dv's.
  const int64_t t = input_shape()[0], f = 4;
  const int64_t qkv_elements = rows * t * heads_ * (2 * key_dim_ + value_dim_);
  const int64_t o_elements = rows * t * heads_ * value_dim_;
  const int64_t lse = rows * heads_ * t * f;
  LayerBuffers b{qkv_elements * f + o_elements * f + lse + output_bytes(rows, DType::kF32),
                 qkv_elements * f + o_elements * f + (need_dx ? 2 * input_bytes(rows, DType::kF32) : 0)};
  if (product_dtype() != DType::kF32) {
    const auto p = static_cast<int64_t>(dtype_size(product_dtype()));
    b.forward += input_bytes(rows, product_dtype()) + o_elements * p;
    b.backward += output_bytes(rows, product_dtype()) + qkv_elements * p;
  }
  return b;
}

Tensor MultiHeadAttention::product_kernel(const Projection& p, int64_t in) const {
  return matrix(compute_weights(p.kernel, p.copy), in);
}

void MultiHeadAttention::project(const Tensor& x_rows, const Tensor& kernel, Projection& p, Tensor& out,
                                 bool with_bias) {
  const int64_t cols = kernel.dim(1);
  const bool bias_on = use_bias_ && with_bias;
  const Tensor bias = bias_on ? p.bias.value.reshaped({cols}) : Tensor();
  Tensor out_rows = as_rows(out, cols);
  kernels::dense_forward(x_rows, kernel, bias_on ? &bias : nullptr, Activation::kLinear, out_rows);
}

void MultiHeadAttention::split(int parts, int index, std::function<void(Tensor&)> all_reduce) {
  DT_CHECK(!all_reduce_ && parts >= 1 && index >= 0 && index < parts && heads_ % parts == 0 && all_reduce,
           name(), ": ", heads_, " heads over ", parts, " parts");
  DT_CHECK(dropout_ == 0.0f, name(), ": attention dropout is not split");
  DT_CHECK(query_.kernel.value.device().is_cpu(), "a MultiHeadAttention layer is split before it is placed");
  const int64_t mine = heads_ / parts, first = index * mine;
  // (d, heads, dim) -> (d, mine, dim): a slice of every row; (heads, dim) -> (mine, dim): contiguous.
  auto cut_heads = [&](Projection& p, int64_t dim) {
    const Tensor whole = p.kernel.value;
    const int64_t d = whole.dim(0), row = heads_ * dim, part = mine * dim;
    Tensor kernel({d, mine, dim});
    for (int64_t i = 0; i < d; ++i) std::copy_n(whole.data() + i * row + first * dim, part, kernel.data() + i * part);
    p.kernel = {p.kernel.name, kernel, Tensor({d, mine, dim})};
    if (!use_bias_) return;
    Tensor bias({mine, dim});
    std::copy_n(p.bias.value.data() + first * dim, part, bias.data());
    p.bias = {p.bias.name, bias, Tensor({mine, dim})};
  };
  cut_heads(query_, key_dim_);
  cut_heads(key_, key_dim_);
  cut_heads(value_, value_dim_);
  // (heads, value_dim, out) -> (mine, value_dim, out): contiguous rows; the bias stays whole.
  const int64_t out = output_shape()[1], part = mine * value_dim_ * out;
  Tensor kernel({mine, value_dim_, out});
  std::copy_n(output_.kernel.value.data() + first * value_dim_ * out, part, kernel.data());
  output_.kernel = {output_.kernel.name, kernel, Tensor({mine, value_dim_, out})};
  heads_ = mine;
  attention_.heads = mine;
  output_bias_here_ = index == 0;
  all_reduce_ = std::move(all_reduce);
}

Tensor MultiHeadAttention::forward(const Tensor& x, const StepContext& ctx) {
  const int64_t n = x.dim(0), t = input_shape()[0], d = input_shape()[1];
  const int64_t hv = heads_ * value_dim_;
  x_ = x;
  xp_ = product_operand(x, xp_);  // x itself, or its copy in the product dtype
  const Tensor x_rows = as_rows(xp_, d);
  project(x_rows, product_kernel(query_, d), query_, reuse(q_, n, {t, heads_, key_dim_}));
  project(x_rows, product_kernel(key_, d), key_, reuse(k_, n, {t, heads_, key_dim_}));
  project(x_rows, product_kernel(value_, d), value_, reuse(v_, n, {t, heads_, value_dim_}));
  Tensor& o = reuse(o_, n, {t, heads_, value_dim_});
  attention_.dropout = ctx.training ? dropout_ : 0.0f;
  attention_.seed = hash_u64(ctx.seed, 0x6174746eull /* "attn" */, dropout_stream_, static_cast<uint64_t>(ctx.step));
  kernels::attention_forward(q_, k_, v_, attention_, o, reuse(lse_, n, {heads_, t}));
  Tensor& y = reuse(y_, n, output_shape());
  op_ = product_operand(o, op_);
  project(as_rows(op_, hv), product_kernel(output_, hv), output_, y, output_bias_here_);
  if (all_reduce_) all_reduce_(y);  // split by heads: the parts' outputs summed
  return y;
}

Tensor MultiHeadAttention::backward(const Tensor& dy, bool need_dx) {
  const int64_t n = dy.dim(0), t = input_shape()[0], d = input_shape()[1], out = output_shape()[1];
  const int64_t hv = heads_ * value_dim_, hk = heads_ * key_dim_;
  auto grads = [&](Projection& p, const Tensor& input_rows, const Tensor& grad_rows) {
    Tensor dkernel = matrix(p.kernel.grad, input_rows.dim(1));
    Tensor dbias = use_bias_ ? p.bias.grad.reshaped({grad_rows.dim(1)}) : Tensor();
    kernels::dense_backward_weights(input_rows, grad_rows, dkernel, use_bias_ ? &dbias : nullptr);
  };
  const Tensor dy_rows = as_rows(product_operand(dy, dyp_), out);
  grads(output_, as_rows(op_, hv), dy_rows);
  Tensor& dout = reuse(do_, n, {t, heads_, value_dim_});
  Tensor dout_rows = as_rows(dout, hv);
  kernels::dense_backward_data(dy_rows, product_kernel(output_, hv), dout_rows);
  Tensor& dq = reuse(dq_, n, {t, heads_, key_dim_});
  Tensor& dk = reuse(dk_, n, {t, heads_, key_dim_});
  Tensor& dv = reuse(dv_, n, {t, heads_, value_dim_});
  kernels::attention_backward(q_, k_, v_, o_, lse_, dout, attention_, dq, dk, dv);
  const Tensor x_rows = as_rows(xp_, d);
  const Tensor dq_rows = as_rows(product_operand(dq, dqp_), hk);
  const Tensor dk_rows = as_rows(product_operand(dk, dkp_), hk);
  const Tensor dv_rows = as_rows(product_operand(dv, dvp_), hv);
  grads(query_, x_rows, dq_rows);
  grads(key_, x_rows, dk_rows);
  grads(value_, x_rows, dv_rows);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, n, input_shape());
  Tensor& part = reuse(dx_part_, n, input_shape());
  Tensor dx_rows = as_rows(dx, d), part_rows = as_rows(part, d);
  kernels::dense_backward_data(dq_rows, product_kernel(query_, d), dx_rows);
  kernels::dense_backward_data(dk_rows, product_kernel(key_, d), part_rows);
  kernels::axpy(1.0f, part, dx);
  kernels::dense_backward_data(dv_rows, product_kernel(value_, d), part_rows);
  kernels::axpy(1.0f, part, dx);
  if (all_reduce_) all_reduce_(dx);  // split by heads: each part's dx is a partial sum
  return dx;
}

void MultiHeadAttention::start_decoding(int64_t batch, int64_t positions) {
  if (!attention_.causal)
    throw ConfigError(str(name(), ": generating tokens needs causal attention (use_causal_mask true): a position "
                          "cannot attend to tokens not generated yet"));
  key_cache_ = Tensor({batch, positions, heads_, key_dim_});
  value_cache_ = Tensor({batch, positions, heads_, value_dim_});
}

Tensor MultiHeadAttention::decode(const Tensor& x, int64_t position) {
  DT_CHECK(device().is_cpu() && !all_reduce_, "generation runs on the CPU, on a whole model");
  const int64_t n = x.dim(0), positions = key_cache_.dim(1), hk = heads_ * key_dim_, hv = heads_ * value_dim_;
  DT_CHECK(position < positions && n == key_cache_.dim(0), "decode position ", position, " of ", positions);
  Tensor q({n, hk}), k({n, hk}), v({n, hv});
  const int64_t d = x.dim(1);
  project(x, matrix(query_.kernel.value, d), query_, q);
  project(x, matrix(key_.kernel.value, d), key_, k);
  project(x, matrix(value_.kernel.value, d), value_, v);
  for (int64_t b = 0; b < n; ++b) {  // this position's keys and values join the cache
    std::copy_n(k.data() + b * hk, hk, key_cache_.data() + (b * positions + position) * hk);
    std::copy_n(v.data() + b * hv, hv, value_cache_.data() + (b * positions + position) * hv);
  }
  // One query per (sample, head) against positions 0..position: softmax in double.
  Tensor o({n, hv});
  std::vector<double> p(static_cast<size_t>(position + 1));
  const float* keys = key_cache_.data();
  const float* values = value_cache_.data();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t h = 0; h < heads_; ++h) {
      const float* qh = q.data() + b * hk + h * key_dim_;
      double top = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j <= position; ++j) {
        const float* kj = keys + (b * positions + j) * hk + h * key_dim_;
        double s = 0.0;
        for (int64_t c = 0; c < key_dim_; ++c) s += static_cast<double>(qh[c]) * kj[c];
        p[j] = s * attention_.scale;
        top = std::max(top, p[j]);
      }
      for (int64_t j = 0; j <= position; ++j) sum += (p[j] = std::exp(p[j] - top));
      float* oh = o.data() + b * hv + h * value_dim_;
      for (int64_t c = 0; c < value_dim_; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j <= position; ++j)
          acc += p[j] * values[(b * positions + j) * hv + h * value_dim_ + c];
        oh[c] = static_cast<float>(acc / sum);
      }
    }
  Tensor y({n, output_shape()[1]});
  project(o, matrix(output_.kernel.value, hv), output_, y);
  return y;
}

const LayerType& multi_head_attention_layer_type() {
  static const LayerType type{
      "MultiHeadAttention",
      "self-attention over a `(time, features)` sequence, Keras' weights (query/key/value/attention_output); "
      "blocked (flash) attention on the CPU",
      {{"num_heads", "attention heads (required, >= 1)"},
       {"key_dim", "the size of each head's queries and keys (required, >= 1)"},
       {"value_dim", "the size of each head's values (default key_dim)"},
       {"output_shape", "the output features (default: the input's)"},
       {"use_bias", "true"},
       {"use_causal_mask", "false; true: position t attends to positions 0..t only (a language model)"},
       {"dropout", "0: the share of attention weights dropped while training (in [0, 1))"}},
      [](config::Section& r) {
        auto o = std::make_shared<MultiHeadAttentionOptions>();
        o->num_heads = r.require_int("num_heads", 1);
        o->key_dim = r.require_int("key_dim", 1);
        o->value_dim = r.get_int("value_dim", 0, 1);
        o->output_shape = r.get_int("output_shape", 0, 1);
        o->use_bias = r.get_bool("use_bias", o->use_bias);
        o->use_causal_mask = r.get_bool("use_causal_mask", o->use_causal_mask);
        o->dropout = r.get_double("dropout", o->dropout, config::kFraction);
        return o;
      },
      [](const LayerSpec& spec, const Shape& input, BuildContext& ctx) -> std::unique_ptr<Layer> {
        if (input.size() != 2)
          throw ConfigError(str(layer_where(spec, ctx.name), ": expects a sequence (time, features), got ",
                                shape_str(input), "; put an Embedding or TokenAndPositionEmbedding before it"));
        return std::make_unique<MultiHeadAttention>(ctx.name, input, spec.options_as<MultiHeadAttentionOptions>(),
                                                    ctx.layer_index);
      },
      nullptr};
  return type;
}

}  // namespace dtrain::nn
