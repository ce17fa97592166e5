// Implementation of optimizer.h. The updates themselves are kernels (ops.h:
// sgd_update, adam_update, rmsprop_update, adagrad_update) on the params'
// device. When the params, their grads and the slots each lie in one arena with
// the same layout (Sequential::place), one update call covers all params as flat
// ranges; otherwise one call per param. Clipping comes first (clipping.h).
#include "optim/optimizer.h"

#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "kernels/ops.h"
#include "optim/schedule.h"

namespace dtrain::optim {

double Optimizer::learning_rate(int64_t step) const {
  return learning_rate_at(spec_.learning_rate, step);
}

void Optimizer::apply(const std::vector<nn::Param*>& params, int64_t step) {
  clipper_.clip(params);
  update(params, step);
}

namespace {

// Makes one slot per param, named "<param>/<suffix>" and filled with `initial`
// (Keras' initializer: zeros, or adagrad's initial_accumulator_value), from the
// arena when given, else on the param's device.
void ensure_slots(std::vector<nn::Param>& slots, const std::vector<nn::Param*>& params, const char* suffix,
                  TensorArena* arena = nullptr, float initial = 0.0f) {
  if (!slots.empty()) {
    DT_CHECK_EQ(slots.size(), params.size());
    return;
  }
  for (const nn::Param* p : params) {
    Tensor t = arena ? arena->take(p->value.shape()) : Tensor(p->value.shape(), p->value.device());
    if (initial != 0.0f) t.fill(initial);  // both sources are zero-filled already
    slots.push_back({p->name + "/" + suffix, t, Tensor()});
  }
}

void append_state(std::vector<nn::Param*>& out, std::vector<nn::Param>& slots) {
  for (auto& s : slots) out.push_back(&s);
}

// True when every list holds its tensors in one storage, in order, at the same
// offsets relative to its first tensor as the first list: then each list is one
// flat range, element i of one matching element i of the others.
bool same_flat_layout(const std::vector<std::vector<const Tensor*>>& lists) {
  const auto& ref = lists[0];
  for (const auto& list : lists) {
    if (list.size() != ref.size() || list.empty()) return false;
    for (size_t k = 0; k < list.size(); ++k) {
      if (!list[k]->shares_storage(*list[0])) return false;
      if (list[k]->data() - list[0]->data() != ref[k]->data() - ref[0]->data()) return false;
      if (k > 0 && ref[k]->data() <= ref[k - 1]->data()) return false;
    }
  }
  return true;
}

std::vector<const Tensor*> values_of(const std::vector<nn::Param*>& ps) {
  std::vector<const Tensor*> out;
  for (const nn::Param* p : ps) out.push_back(&p->value);
  return out;
}
std::vector<const Tensor*> grads_of(const std::vector<nn::Param*>& ps) {
  std::vector<const Tensor*> out;
  for (const nn::Param* p : ps) out.push_back(&p->grad);
  return out;
}
std::vector<const Tensor*> values_of(const std::vector<nn::Param>& ps) {
  std::vector<const Tensor*> out;
  for (const nn::Param& p : ps) out.push_back(&p.value);
  return out;
}

// The flat range from the first to the last tensor of a list.
Tensor flat(const std::vector<const Tensor*>& list) { return Tensor::span(*list.front(), *list.back()); }

class Sgd : public Optimizer {
 public:
  explicit Sgd(const OptimizerSpec& spec) : Optimizer(spec) {}

  void update(const std::vector<nn::Param*>& params, int64_t step) override {
    const bool momentum = spec_.momentum != 0.0;
    if (momentum) ensure_slots(velocity_, params, "momentum");
    kernels::SgdCoeffs k;
    k.lr = static_cast<float>(learning_rate(step));
    k.momentum = static_cast<float>(spec_.momentum);
    k.nesterov = spec_.nesterov;
    std::vector<std::vector<const Tensor*>> lists = {values_of(params), grads_of(params)};
    if (momentum) lists.push_back(values_of(velocity_));
    if (same_flat_layout(lists)) {
      Tensor w = flat(lists[0]);
      Tensor v = momentum ? flat(lists[2]) : Tensor();
      kernels::sgd_update(w, flat(lists[1]), momentum ? &v : nullptr, k);
      return;
    }
    for (size_t i = 0; i < params.size(); ++i)
      kernels::sgd_update(params[i]->value, params[i]->grad, momentum ? &velocity_[i].value : nullptr, k);
  }

  std::vector<nn::Param*> state() override {
    std::vector<nn::Param*> out;
    for (auto& s : velocity_) out.push_back(&s);
    return out;
  }

  int slots_per_param() const override { return spec_.momentum != 0.0 ? 1 : 0; }

  void create_state(const std::vector<nn::Param*>& params, TensorArena* arena) override {
    if (spec_.momentum != 0.0) ensure_slots(velocity_, params, "momentum", arena);
  }

 private:
  std::vector<nn::Param> velocity_;
};

class Adam : public Optimizer {
 public:
  Adam(const OptimizerSpec& spec, bool decoupled_decay)
      : Optimizer(spec), decoupled_decay_(decoupled_decay) {}

  void update(const std::vector<nn::Param*>& params, int64_t step) override {
    ensure_slots(m_, params, "m");
    ensure_slots(v_, params, "v");
    const double lr = learning_rate(step);
    const double b1 = spec_.beta_1, b2 = spec_.beta_2;
    const double t = static_cast<double>(step + 1);
    kernels::AdamCoeffs k;
    k.alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
    k.decay = decoupled_decay_ ? static_cast<float>(lr * spec_.weight_decay) : 0.0f;
    k.b1 = static_cast<float>(b1);
    k.b2 = static_cast<float>(b2);
    k.eps = static_cast<float>(spec_.epsilon);
    const std::vector<std::vector<const Tensor*>> lists = {values_of(params), grads_of(params), values_of(m_),
                                                           values_of(v_)};
    if (same_flat_layout(lists)) {
      Tensor w = flat(lists[0]), m = flat(lists[2]), v = flat(lists[3]);
      kernels::adam_update(w, flat(lists[1]), m, v, k);
      return;
    }
    for (size_t i = 0; i < params.size(); ++i)
      kernels::adam_update(params[i]->value, params[i]->grad, m_[i].value, v_[i].value, k);
  }

  int slots_per_param() const override { return 2; }

  void create_state(const std::vector<nn::Param*>& params, TensorArena* arena) override {
    ensure_slots(m_, params, "m", arena);
    ensure_slots(v_, params, "v", arena);
  }

  std::vector<nn::Param*> state() override {
    std::vector<nn::Param*> out;
    for (auto& s : m_) out.push_back(&s);
    for (auto& s : v_) out.push_back(&s);
    return out;
  }

 private:
  bool decoupled_decay_;
  std::vector<nn::Param> m_, v_;
};

// Keras' RMSprop: slot "velocity" (the mean square), "momentum" when momentum > 0
// and "average_gradient" when centered, in that order (Keras' build order).
class Rmsprop : public Optimizer {
 public:
  explicit Rmsprop(const OptimizerSpec& spec) : Optimizer(spec) {}

  void update(const std::vector<nn::Param*>& params, int64_t step) override {
    create_state(params, nullptr);
    kernels::RmspropCoeffs k;
    k.lr = static_cast<float>(learning_rate(step));
    k.rho = static_cast<float>(spec_.rho);
    k.momentum = static_cast<float>(spec_.momentum);
    k.eps = static_cast<float>(spec_.epsilon);
    k.centered = spec_.centered;
    std::vector<std::vector<const Tensor*>> lists = {values_of(params), grads_of(params), values_of(velocity_)};
    if (has_momentum()) lists.push_back(values_of(momentum_));
    if (spec_.centered) lists.push_back(values_of(average_));
    if (same_flat_layout(lists)) {
      Tensor w = flat(lists[0]), v = flat(lists[2]);
      Tensor m = has_momentum() ? flat(lists[3]) : Tensor();
      Tensor a = spec_.centered ? flat(lists.back()) : Tensor();
      kernels::rmsprop_update(w, flat(lists[1]), v, has_momentum() ? &m : nullptr, spec_.centered ? &a : nullptr, k);
      return;
    }
    for (size_t i = 0; i < params.size(); ++i)
      kernels::rmsprop_update(params[i]->value, params[i]->grad, velocity_[i].value,
                              has_momentum() ? &momentum_[i].value : nullptr,
                              spec_.centered ? &average_[i].value : nullptr, k);
  }

  int slots_per_param() const override { return 1 + (has_momentum() ? 1 : 0) + (spec_.centered ? 1 : 0); }

  void create_state(const std::vector<nn::Param*>& params, TensorArena* arena) override {
    ensure_slots(velocity_, params, "velocity", arena);
    if (has_momentum()) ensure_slots(momentum_, params, "momentum", arena);
    if (spec_.centered) ensure_slots(average_, params, "average_gradient", arena);
  }

  std::vector<nn::Param*> state() override {
    std::vector<nn::Param*> out;
    append_state(out, velocity_);
    append_state(out, momentum_);
    append_state(out, average_);
    return out;
  }

 private:
  bool has_momentum() const { return spec_.momentum > 0.0; }
  std::vector<nn::Param> velocity_, momentum_, average_;
};

// Keras' Adagrad: slot "accumulator", starting at initial_accumulator_value.
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(const OptimizerSpec& spec) : Optimizer(spec) {}

  void update(const std::vector<nn::Param*>& params, int64_t step) override {
    create_state(params, nullptr);
    kernels::AdagradCoeffs k;
    k.lr = static_cast<float>(learning_rate(step));
    k.eps = static_cast<float>(spec_.epsilon);
    const std::vector<std::vector<const Tensor*>> lists = {values_of(params), grads_of(params),
                                                           values_of(accumulator_)};
    if (same_flat_layout(lists)) {
      Tensor w = flat(lists[0]), a = flat(lists[2]);
      kernels::adagrad_update(w, flat(lists[1]), a, k);
      return;
    }
    for (size_t i = 0; i < params.size(); ++i)
      kernels::adagrad_update(params[i]->value, params[i]->grad, accumulator_[i].value, k);
  }

  int slots_per_param() const override { return 1; }

  void create_state(const std::vector<nn::Param*>& params, TensorArena* arena) override {
    ensure_slots(accumulator_, params, "accumulator", arena, static_cast<float>(spec_.initial_accumulator_value));
  }

  std::vector<nn::Param*> state() override {
    std::vector<nn::Param*> out;
    append_state(out, accumulator_);
    return out;
  }

 private:
  std::vector<nn::Param> accumulator_;
};

}  // namespace

const std::vector<OptimizerType>& optimizer_types() {
  auto read_adam = [](config::Section& r, OptimizerSpec& o) {
    o.beta_1 = r.get_double("beta_1", o.beta_1, config::kFraction);
    o.beta_2 = r.get_double("beta_2", o.beta_2, config::kFraction);
    o.epsilon = r.get_double("epsilon", o.epsilon, config::kPositive);
  };
  const std::vector<config::KeyDoc> adam_keys = {
      {"beta_1", "0.9, in [0, 1)"}, {"beta_2", "0.999, in [0, 1)"}, {"epsilon", "1e-7, > 0"}};
  std::vector<config::KeyDoc> adamw_keys = adam_keys;
  adamw_keys.push_back({"weight_decay", "0.004, >= 0 (decoupled, applied as lr * weight_decay * w)"});
  static const std::vector<OptimizerType> table = {
      {"sgd", "`v = momentum * v - lr * g; w += v` (Nesterov: `w += momentum * v - lr * g`); learning_rate 0.01",
       {{"momentum", "0, in [0, 1)"}, {"nesterov", "false"}}, 0.01,
       [](config::Section& r, OptimizerSpec& o) {
         o.momentum = r.get_double("momentum", o.momentum, config::kFraction);
         o.nesterov = r.get_bool("nesterov", o.nesterov);
       },
       [](const OptimizerSpec& spec) { return std::make_unique<Sgd>(spec); }},
      {"adam", "Adam with bias correction; learning_rate 0.001", adam_keys, 0.001, read_adam,
       [](const OptimizerSpec& spec) { return std::make_unique<Adam>(spec, false); }},
      {"adamw", "Adam with decoupled weight decay; learning_rate 0.001", adamw_keys, 0.001,
       [read_adam](config::Section& r, OptimizerSpec& o) {
         read_adam(r, o);
         o.weight_decay = r.get_double("weight_decay", o.weight_decay, config::kNonNegative);
       },
       [](const OptimizerSpec& spec) { return std::make_unique<Adam>(spec, true); }},
      {"rmsprop",
       "`v = rho v + (1-rho) g^2; w -= lr g / sqrt(v + epsilon)`; slots `velocity`, `momentum` (momentum > 0), "
       "`average_gradient` (centered); learning_rate 0.001",
       {{"rho", "0.9, in [0, 1) (decay of the mean square `v`)"},
        {"momentum", "0, in [0, 1) (> 0: `m = momentum m + step; w -= m`)"},
        {"epsilon", "1e-7, > 0 (inside the square root, as in Keras)"},
        {"centered", "false (true: divide by `sqrt(v - a^2 + epsilon)`, `a` the mean gradient)"}},
       0.001,
       [](config::Section& r, OptimizerSpec& o) {
         o.rho = r.get_double("rho", o.rho, config::kFraction);
         o.momentum = r.get_double("momentum", o.momentum, config::kFraction);
         o.epsilon = r.get_double("epsilon", o.epsilon, config::kPositive);
         o.centered = r.get_bool("centered", o.centered);
       },
       [](const OptimizerSpec& spec) { return std::make_unique<Rmsprop>(spec); }},
      {"adagrad", "`a += g^2; w -= lr g / sqrt(a + epsilon)`; slot `accumulator`; learning_rate 0.001",
       {{"initial_accumulator_value", "0.1, >= 0 (the accumulator's starting value)"},
        {"epsilon", "1e-7, > 0 (inside the square root, as in Keras)"}},
       0.001,
       [](config::Section& r, OptimizerSpec& o) {
         o.initial_accumulator_value =
             r.get_double("initial_accumulator_value", o.initial_accumulator_value, config::kNonNegative);
         o.epsilon = r.get_double("epsilon", o.epsilon, config::kPositive);
       },
       [](const OptimizerSpec& spec) { return std::make_unique<Adagrad>(spec); }},
  };
  return table;
}

const OptimizerType& optimizer_type(const std::string& name) {
  return config::find_entry(optimizer_types(), name, "optimizer");
}

const OptimizerType& optimizer_type_of(const OptimizerSpec& spec) {
  return spec.type ? *spec.type : optimizer_type("adam");
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec) { return optimizer_type_of(spec).make(spec); }

}  // namespace dtrain::optim
