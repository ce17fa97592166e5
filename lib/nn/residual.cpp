// Residual: y = act(layers(x) + shortcut(x)). Forward runs both branches and adds
// their outputs; backward sends the same gradient down both and adds the two
// input gradients. Sums go into the block's own tensors, never into a child's,
// because a child's output may be its input (Dropout at inference) or be kept
// for its own backward (an Activation's y).
#include "nn/layers.h"

namespace dtrain::nn {
namespace {

Tensor forward_branch(Residual::Branch& branch, const Tensor& x, const StepContext& ctx) {
  Tensor h = x;
  for (auto& layer : branch) h = layer->run_forward(h, ctx);
  return h;
}

// The branch's input gradient (undefined when !need_dx). A layer's own dx is
// needed when a layer before it in the branch, or the block's input, needs it.
Tensor backward_branch(Residual::Branch& branch, const Tensor& dy, bool need_dx) {
  Tensor g = dy;
  for (size_t i = branch.size(); i-- > 0;) g = branch[i]->run_backward(g, need_dx || i > 0);
  return g;
}

}  // namespace

Residual::Residual(const std::string& name, const Shape& input, Branch layers, Branch shortcut,
                   Activation act)
    : Layer(name, "Residual", input, layers.back()->output_shape()),
      act_(act),
      layers_(std::move(layers)),
      shortcut_(std::move(shortcut)) {}

Tensor Residual::forward(const Tensor& x, const StepContext& ctx) {
  const Tensor a = forward_branch(layers_, x, ctx);
  const Tensor b = forward_branch(shortcut_, x, ctx);  // x itself for the identity
  const int64_t n = x.dim(0);
  Tensor& sum = reuse(sum_, n, output_shape());
  sum.copy_from(a);
  kernels::axpy(1.0f, b, sum);
  if (act_ == Activation::kLinear) return sum;
  Tensor& y = reuse(y_, n, output_shape());
  kernels::activation_forward(act_, sum, y);
  return y;
}

Tensor Residual::backward(const Tensor& dy, bool need_dx) {
  const Tensor dsum = before_activation(act_, y_, dy, dsum_);
  const Tensor da = backward_branch(layers_, dsum, need_dx);
  const Tensor db = shortcut_.empty() ? dsum : backward_branch(shortcut_, dsum, need_dx);
  if (!need_dx) return {};
  Tensor& dx = reuse(dx_, dy.dim(0), input_shape());
  dx.copy_from(da);
  kernels::axpy(1.0f, db, dx);
  return dx;
}

std::vector<Param*> Residual::params() {
  std::vector<Param*> out;
  for (const Branch* branch : {&layers_, &shortcut_})
    for (auto& layer : *branch)
      for (Param* p : layer->params()) out.push_back(p);
  return out;
}

void Residual::initialize(Rng& rng) {
  // Each child draws from its own stream, as Sequential's layers do.
  const uint64_t seed = rng.next_u64();
  uint64_t index = 0;
  for (const Branch* branch : {&layers_, &shortcut_})
    for (auto& layer : *branch) {
      Rng child(hash_u64(seed, index++));
      layer->initialize(child);
    }
}

std::vector<Layer*> Residual::children() {
  std::vector<Layer*> out;
  for (const Branch* branch : {&layers_, &shortcut_})
    for (auto& layer : *branch) out.push_back(layer.get());
  return out;
}

void Residual::move_extras(const Device& device) {
  for (const Branch* branch : {&layers_, &shortcut_})
    for (auto& layer : *branch) layer->set_device(device);
  sum_ = y_ = dsum_ = dx_ = Tensor();
}

}  // namespace dtrain::nn
