// Implementation of optimizer.h: fused per-parameter update loops (own loops; oneDNN
// has no optimizer primitives). Slots are created lazily on the first apply().
//
// The loops vectorise (this target is built with -fno-math-errno, so std::sqrt is
// sqrtps) and are built twice, for AVX2 and for the baseline, the CPU picking one
// when the program loads. Both give the same bits: the "avx2" target has no FMA
// to contract with, and sqrt and division are exactly rounded.
#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "optim/schedule.h"

namespace dtrain::optim {

double Optimizer::learning_rate(int64_t step) const {
  return learning_rate_at(spec_.learning_rate, step);
}

namespace {

// Makes one zero-filled slot per param, named "<param>/<suffix>".
void ensure_slots(std::vector<nn::Param>& slots, const std::vector<nn::Param*>& params,
                  const char* suffix) {
  if (!slots.empty()) {
    DT_CHECK_EQ(slots.size(), params.size());
    return;
  }
  for (const nn::Param* p : params) slots.push_back({p->name + "/" + suffix, Tensor(p->value.shape()), Tensor()});
}

// Runs fn(begin, count) over [0, n) in chunks, in parallel when n is large. The
// updates are element-wise, so results do not depend on chunks or threads.
template <class F>
void for_chunks(int64_t n, F fn) {
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(kChunk, n - c * kChunk));
}

// w -= lr * g
[[gnu::target_clones("avx2", "default")]]
void sgd_update(float* __restrict w, const float* __restrict g, int64_t n, float lr) {
  for (int64_t i = 0; i < n; ++i) w[i] -= lr * g[i];
}

// v = mu*v - lr*g; w += v, or with Nesterov w += mu*v - lr*g
[[gnu::target_clones("avx2", "default")]]
void momentum_update(float* __restrict w, const float* __restrict g, float* __restrict v,
                     int64_t n, float lr, float mu, bool nesterov) {
  for (int64_t i = 0; i < n; ++i) {
    v[i] = mu * v[i] - lr * g[i];
    w[i] += nesterov ? mu * v[i] - lr * g[i] : v[i];
  }
}

// Adam(W): decoupled decay, moment updates, bias-corrected step (alpha carries the
// bias correction).
struct AdamCoeffs {
  float decay, b1, b2, alpha, eps;
};
[[gnu::target_clones("avx2", "default")]]
void adam_update(float* __restrict w, const float* __restrict g, float* __restrict m,
                 float* __restrict v, int64_t n, AdamCoeffs k) {
  for (int64_t i = 0; i < n; ++i) {
    w[i] -= k.decay * w[i];
    m[i] = k.b1 * m[i] + (1.0f - k.b1) * g[i];
    v[i] = k.b2 * v[i] + (1.0f - k.b2) * g[i] * g[i];
    w[i] -= k.alpha * m[i] / (std::sqrt(v[i]) + k.eps);
  }
}

class Sgd : public Optimizer {
 public:
  explicit Sgd(const config::OptimizerSpec& spec) : Optimizer(spec) {}

  void apply(const std::vector<nn::Param*>& params, int64_t step) override {
    const float lr = static_cast<float>(learning_rate(step));
    const float mu = static_cast<float>(spec_.momentum);
    if (mu == 0.0f) {
      for (nn::Param* p : params) {
        float* w = p->value.data();
        const float* g = p->grad.data();
        for_chunks(p->value.numel(),
                   [&](int64_t i, int64_t count) { sgd_update(w + i, g + i, count, lr); });
      }
      return;
    }
    ensure_slots(velocity_, params, "momentum");
    const bool nesterov = spec_.nesterov;
    for (size_t k = 0; k < params.size(); ++k) {
      float* w = params[k]->value.data();
      const float* g = params[k]->grad.data();
      float* v = velocity_[k].value.data();
      for_chunks(params[k]->value.numel(), [&](int64_t i, int64_t count) {
        momentum_update(w + i, g + i, v + i, count, lr, mu, nesterov);
      });
    }
  }

  std::vector<nn::Param*> state() override {
    std::vector<nn::Param*> out;
    for (auto& s : velocity_) out.push_back(&s);
    return out;
  }

  void create_state(const std::vector<nn::Param*>& params) override {
    if (spec_.momentum != 0.0) ensure_slots(velocity_, params, "momentum");
  }

 private:
  std::vector<nn::Param> velocity_;
};

class Adam : public Optimizer {
 public:
  Adam(const config::OptimizerSpec& spec, bool decoupled_decay)
      : Optimizer(spec), decoupled_decay_(decoupled_decay) {}

  void apply(const std::vector<nn::Param*>& params, int64_t step) override {
    ensure_slots(m_, params, "m");
    ensure_slots(v_, params, "v");
    const double lr = learning_rate(step);
    const double b1 = spec_.beta_1, b2 = spec_.beta_2;
    const double t = static_cast<double>(step + 1);
    const float alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
    const float decay = decoupled_decay_ ? static_cast<float>(lr * spec_.weight_decay) : 0.0f;
    const AdamCoeffs coeffs{decay, static_cast<float>(b1), static_cast<float>(b2), alpha,
                            static_cast<float>(spec_.epsilon)};
    for (size_t k = 0; k < params.size(); ++k) {
      float* w = params[k]->value.data();
      const float* g = params[k]->grad.data();
      float* m = m_[k].value.data();
      float* v = v_[k].value.data();
      for_chunks(params[k]->value.numel(), [&](int64_t i, int64_t count) {
        adam_update(w + i, g + i, m + i, v + i, count, coeffs);
      });
    }
  }

  void create_state(const std::vector<nn::Param*>& params) override {
    ensure_slots(m_, params, "m");
    ensure_slots(v_, params, "v");
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

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const config::OptimizerSpec& spec) {
  if (spec.type == "sgd") return std::make_unique<Sgd>(spec);
  if (spec.type == "adam") return std::make_unique<Adam>(spec, false);
  if (spec.type == "adamw") return std::make_unique<Adam>(spec, true);
  throw ConfigError(str(spec.path, ".type: unknown optimizer '", spec.type,
                        "'; valid optimizers: sgd, adam, adamw"));
}

}  // namespace dtrain::optim
