// The concrete layer classes and their options (what each type's registry entry
// reads from its JSON object; layer_registry.h). Build them through make_layer()
// (layer_factory.h), which checks the spec against the input shape; the
// constructors assume valid shapes.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/ops.h"
#include "nn/layer.h"
#include "nn/model_spec.h"

namespace dtrain::nn {

using kernels::Activation;

struct DenseOptions : LayerOptions {
  int64_t units = 0;
  Activation activation = Activation::kLinear;
  bool use_bias = true;
};

struct Conv2DOptions : LayerOptions {
  int64_t filters = 0;
  int64_t kernel_size[2] = {0, 0};
  int64_t strides[2] = {1, 1};
  bool same_padding = false;  // padding "same" (else "valid")
  Activation activation = Activation::kLinear;
  bool use_bias = true;
};

// MaxPooling2D and AveragePooling2D.
struct Pool2DOptions : LayerOptions {
  int64_t pool_size[2] = {2, 2};
  int64_t strides[2] = {2, 2};  // Keras: pool_size unless given
  bool same_padding = false;
};

struct DropoutOptions : LayerOptions {
  double rate = 0.0;  // in [0, 1)
};

struct BatchNormalizationOptions : LayerOptions {
  double momentum = 0.99;
  double epsilon = 1e-3;
  bool center = true;
  bool scale = true;
};

struct ActivationOptions : LayerOptions {
  Activation activation = Activation::kLinear;
};

// y = activation(layers(x) + shortcut(x)); an empty shortcut is the identity.
struct ResidualOptions : LayerOptions {
  std::vector<LayerSpec> layers, shortcut;
  Activation activation = Activation::kLinear;
};

// y = act(x . kernel + bias) over the last axis; kernel (in, units). The
// input is (in) or a sequence (T, in).
// Megatron-LM's split of a Dense layer over the `parts` tasks of a tensor-parallel
// group (strategy/parallel/tensor_parallel.h decides which layers split how; nn never
// talks to the other tasks itself: `all_reduce` sums a tensor in place over the
// group). kColumn keeps the output columns [index x units/parts, ...) of the
// kernel and the bias; its output is that slice, and its backward sums dx over
// the group (each task's dx is a partial sum). kRow keeps the input rows
// [index x in/parts, ...) of the kernel and takes the matching slice of its
// input; its forward sums the partial products over the group, then adds the
// bias (kept whole, added on index 0 before the sum) and applies the
// activation. A column-split layer followed by a row-split one (Megatron's MLP
// pairing) needs one all-reduce forward and one backward.
struct DenseSplit {
  enum class Kind { kColumn, kRow };
  Kind kind = Kind::kColumn;
  int parts = 1;
  int index = 0;
  std::function<void(Tensor&)> all_reduce;
};

class Dense : public Layer {
 public:
  Dense(const std::string& name, const Shape& input, int64_t units, Activation act, bool use_bias);
  // Cuts the (initialised, not yet placed) params to this task's part: the
  // values are the whole layer's, so a split model starts where the whole one does.
  void split(const DenseSplit& split);
  const std::optional<DenseSplit>& split_of() const { return split_; }
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  std::vector<Param*> params() override;
  void initialize(Rng& rng) override;
  bool supports_dtype(DType dtype) const override;
  // bfloat16 on the CPU, but not with softmax (as supports_dtype).
  bool supports_product_dtype(DType dtype) const override;
  void refresh_compute_weights() override;
  // y; dx and the gradient before a fused activation; with products in
  // bfloat16, x's and that gradient's copies in it.
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  int64_t weight_copy_bytes(DType dtype) const override;  // the kernel's copy
  Tensor decode(const Tensor& x, int64_t position) override;  // (batch, in) -> (batch, units)

 private:
  static Tensor rows(const Tensor& t, int64_t features);
  Tensor row_split_forward(const Tensor& x);  // kRow: the partial product summed, then bias and activation
  Activation act_;
  bool use_bias_;
  std::optional<DenseSplit> split_;
  Param kernel_, bias_;
  Tensor kernel_copy_;  // the kernel in the compute dtype, or the product dtype (mixed precision)
  Tensor x_, y_, z_, dpre_, dx_;  // z_: the matmul's output before gelu
  Tensor xp_, dpre_p_;            // x and dpre in the product dtype (products in bfloat16)
};

// y = act(conv(x, kernel) + bias); kernel (kh, kw, in, filters), NHWC activations.
class Conv2D : public Layer {
 public:
  Conv2D(const std::string& name, const Shape& input, const Shape& output, int64_t kh, int64_t kw,
         const kernels::Conv2DParams& p, Activation act, bool use_bias);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  std::vector<Param*> params() override;
  void initialize(Rng& rng) override;
  bool supports_dtype(DType dtype) const override;
  void refresh_compute_weights() override;
  // y; dx and the gradient before a fused activation.
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  int64_t weight_copy_bytes(DType dtype) const override;  // the kernel's copy

 private:
  kernels::Conv2DParams p_;
  Activation act_;
  bool use_bias_;
  Param kernel_, bias_;
  Tensor kernel_copy_;  // the kernel in the compute dtype (mixed precision)
  Tensor x_, y_, dpre_, dx_;
};

// MaxPooling2D, AveragePooling2D and (with the whole image as window) GlobalAveragePooling2D.
class Pool2D : public Layer {
 public:
  Pool2D(const std::string& name, const std::string& type, const Shape& input, const Shape& output,
         const kernels::Pool2DParams& p);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  // bfloat16 too, and float16 on a GPU (the CPU backend has no float16 kernels).
  bool supports_dtype(DType dtype) const override {
    return dtype == DType::kF32 || dtype == DType::kBF16 || !device().is_cpu();
  }

 private:
  kernels::Pool2DParams p_;
  kernels::Workspace ws_;
  Tensor y_, dx_;
};

class Flatten : public Layer {
 public:
  Flatten(const std::string& name, const Shape& input);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  bool supports_dtype(DType) const override { return true; }
  // Views of its input and of dy: nothing of its own.
  LayerBuffers buffers(int64_t, DType, bool) const override { return {}; }
};

// Inverted dropout; the mask is a function of (seed, layer index, step).
class Dropout : public Layer {
 public:
  Dropout(const std::string& name, const Shape& input, float rate, uint64_t layer_index);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  // bfloat16, and float16 on a GPU.
  bool supports_dtype(DType dtype) const override { return dtype != DType::kF16 || !device().is_cpu(); }
  // y and its float32 mask, dx; nothing at rate 0 (it passes its input on).
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  Tensor decode(const Tensor& x, int64_t) override { return x; }  // inference: the identity

 private:
  float rate_;
  uint64_t layer_index_;
  bool applied_ = false;
  Tensor y_, mask_, dx_;
};

class ActivationLayer : public Layer {
 public:
  ActivationLayer(const std::string& name, const Shape& input, Activation act);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  Tensor decode(const Tensor& x, int64_t position) override;
  // bfloat16 too, and float16 on a GPU; softmax and gelu in float32 (Keras'
  // mixed precision computes softmax so; dtrain's gelu gradient is float32).
  bool supports_dtype(DType dtype) const override {
    if (dtype == DType::kF32) return true;
    if (kernels::grad_from_input(act_)) return false;
    return act_ != Activation::kSoftmax && (dtype == DType::kBF16 || !device().is_cpu());
  }

 private:
  Activation act_;
  Tensor x_, y_, dx_;  // x_: gelu's input
};

// Normalises over the channels (last) axis; moving statistics for inference.
class BatchNormalization : public Layer {
 public:
  BatchNormalization(const std::string& name, const Shape& input, float momentum, float epsilon,
                     bool center, bool scale);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  std::vector<Param*> params() override;
  void initialize(Rng& rng) override;
  // y; dx, computed even when not passed on (it yields dgamma, dbeta).
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;

 protected:
  void move_extras(const Device& device) override;

 private:
  float momentum_, epsilon_;
  bool center_, scale_;
  Param gamma_, beta_, moving_mean_, moving_variance_;
  Tensor batch_mean_, batch_variance_, x_, y_, dx_, dgamma_scratch_, dbeta_scratch_;
};

// y = act(layers(x) + shortcut(x)): a ResNet block. Each branch is a stack of
// layers run in order; an empty shortcut is the identity. Both branches end in
// the block's output shape (make_layer checks).
class Residual : public Layer {
 public:
  using Branch = std::vector<std::unique_ptr<Layer>>;
  Residual(const std::string& name, const Shape& input, Branch layers, Branch shortcut, Activation act);
  Tensor forward(const Tensor& x, const StepContext& ctx) override;
  Tensor backward(const Tensor& dy, bool need_dx) override;
  // The branches' params: the main branch's layers first, then the shortcut's.
  std::vector<Param*> params() override;
  // The main branch's layers, then the shortcut's.
  std::vector<Layer*> children() override;
  void initialize(Rng& rng) override;
  // Its children's (in float32), its sum (and y after an activation); dx and dsum.
  LayerBuffers buffers(int64_t rows, DType dtype, bool need_dx) const override;
  void start_decoding(int64_t batch, int64_t positions) override;
  Tensor decode(const Tensor& x, int64_t position) override;

 protected:
  void move_extras(const Device& device) override;

 private:
  Activation act_;
  Branch layers_, shortcut_;
  Tensor sum_, y_, dsum_, dx_;
};

// A stack of layers run in order (a Residual branch, a TransformerDecoder's
// blocks): forward returns the last output (x itself for an empty stack);
// backward returns the stack's input gradient (undefined when !need_dx). A
// layer's own dx is needed when a layer before it, or the stack's input, needs it.
Tensor forward_branch(Residual::Branch& branch, const Tensor& x, const StepContext& ctx);
Tensor backward_branch(Residual::Branch& branch, const Tensor& dy, bool need_dx);

}  // namespace dtrain::nn
