// Implementation of shard_store.h.
#include "ps/shard_store.h"

#include <cstring>
#include <filesystem>

#include "checkpoint/safetensors.h"
#include "core/strings.h"
#include "ps/ps_checkpoint.h"

#include "core/check.h"
#include "kernels/ops.h"
#include "nn/sequential.h"

namespace dtrain::ps {

std::vector<VariableInfo> model_variables(const nn::ModelSpec& model, uint64_t seed) {
  const nn::Sequential m(model, seed);
  std::vector<VariableInfo> out;
  for (const nn::Param* p : m.params()) out.push_back({p->name, p->value.shape(), p->trainable()});
  return out;
}

// A ps's optimizer clips nothing: a shard is only part of a variable, so the
// workers clip whole gradients (per-variable and global norms) before they push
// (ParameterServerStrategy::train_step, optim/clipping.h).
ShardStore::ShardStore(const Placement& placement, int ps, const nn::ModelSpec& model, uint64_t seed,
                       const optim::OptimizerSpec& optimizer)
    : optimizer_(optim::make_optimizer(optim::without_clipping(optimizer))) {
  const nn::Sequential initial(model, seed);  // the same initial values every task computes
  const std::vector<nn::Param*> variables = initial.params();
  DT_CHECK_EQ(variables.size(), placement.variables.size());
  std::vector<const float*> values;
  for (const nn::Param* v : variables) values.push_back(v->value.data());
  init(placement, ps, values);
}

ShardStore::ShardStore(const Placement& placement, int ps, const std::vector<const float*>& initial_values,
                       const optim::OptimizerSpec& optimizer)
    : optimizer_(optim::make_optimizer(optim::without_clipping(optimizer))) {
  DT_CHECK_EQ(initial_values.size(), placement.variables.size());
  init(placement, ps, initial_values);
}

void ShardStore::init(const Placement& placement, int ps, const std::vector<const float*>& values) {
  ps_ = ps;
  num_ps_ = placement.num_ps;
  for (int i : placement.ps_shards[ps]) {
    const Shard& s = placement.shards[i];
    auto p = std::make_unique<nn::Param>();
    p->name = placement.shard_name(s);
    p->value = Tensor({s.count});
    shapes_.push_back(placement.shard_shape(s));
    std::memcpy(p->value.data(), values[s.variable] + s.offset, static_cast<size_t>(s.count) * sizeof(float));
    if (placement.variables[s.variable].trainable) {
      p->grad = Tensor({s.count});
      trainable_.push_back(p.get());
      trainable_shapes_.push_back(shapes_.back());
      trainable_elements_ += s.count;
    }
    elements_ += s.count;
    params_.push_back(std::move(p));
  }
  optimizer_->create_state(trainable_);
  slots_ = trainable_.empty() ? 0 : static_cast<int>(optimizer_->state().size() / trainable_.size());
  DT_CHECK_EQ(optimizer_->state().size(), static_cast<size_t>(slots_) * trainable_.size());
}

ShardStore::~ShardStore() = default;

int64_t ShardStore::state_elements() const { return elements_ + slots_ * trainable_elements_; }

void ShardStore::write_values(float* out) const {
  for (const auto& p : params_) {
    std::memcpy(out, p->value.data(), p->value.bytes());
    out += p->value.numel();
  }
}

void ShardStore::apply(const float* payload, float scale, int64_t step) {
  for (const auto& p : params_) {
    const int64_t n = p->value.numel();
    float* target = p->trainable() ? p->grad.data() : p->value.data();
    if (p->trainable()) {
      for (int64_t i = 0; i < n; ++i) target[i] = payload[i] * scale;
    } else {
      for (int64_t i = 0; i < n; ++i) target[i] += payload[i] * scale;
    }
    payload += n;
  }
  if (!trainable_.empty()) optimizer_->apply(trainable_, step);
}

void ShardStore::write_state(float* out) const {
  write_values(out);
  out += elements_;
  const std::vector<nn::Param*> state = optimizer_->state();
  for (const nn::Param* s : state) {  // slot-major: slot k of every trainable shard, then k + 1
    std::memcpy(out, s->value.data(), s->value.bytes());
    out += s->value.numel();
  }
}

void ShardStore::read_state(const float* in) {
  for (const auto& p : params_) {
    std::memcpy(p->value.data(), in, p->value.bytes());
    in += p->value.numel();
  }
  for (nn::Param* s : optimizer_->state()) {
    std::memcpy(s->value.data(), in, s->value.bytes());
    in += s->value.numel();
  }
}

std::string ShardStore::file_name() const { return shard_file_name(ps_, num_ps_); }

checkpoint::FileDigest ShardStore::save(const std::string& dir, int64_t step, int64_t version) const {
  std::vector<checkpoint::TensorRef> tensors;
  for (size_t i = 0; i < params_.size(); ++i) tensors.push_back({params_[i]->name, shapes_[i], params_[i]->value.data()});
  // Slot k of the trainable shards, in order: the same shapes as their shards.
  const std::vector<nn::Param*> state = optimizer_->state();
  for (size_t k = 0; k < state.size(); ++k)
    tensors.push_back({state[k]->name, trainable_shapes_[k % trainable_.size()], state[k]->value.data()});
  const std::map<std::string, std::string> metadata = {{"format", "dtrain"},
                                                       {"dtrain_kind", "ps_shards"},
                                                       {"dtrain_ps", str(ps_, " of ", num_ps_)},
                                                       {"dtrain_step", std::to_string(step)},
                                                       {"dtrain_ps_version", std::to_string(version)},
                                                       {"dtrain_version", DTRAIN_VERSION}};
  checkpoint::FileDigest digest;
  digest.sha256 = checkpoint::write_safetensors((std::filesystem::path(dir) / file_name()).string(), tensors, metadata,
                                                &digest.bytes);
  return digest;
}

}  // namespace dtrain::ps
