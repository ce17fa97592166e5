// Optimizers and schedules against Keras' update formulas, computed by hand.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/rng.h"
#include "nn/sequential.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

using namespace dtrain;

namespace {

nn::Param param(float w, float g) {
  nn::Param p{"w", Tensor({1}), Tensor({1})};
  p.value.data()[0] = w;
  p.grad.data()[0] = g;
  return p;
}

optim::OptimizerSpec spec(const std::string& type, double lr) {
  optim::OptimizerSpec s;
  s.type = &optim::optimizer_type(type);
  s.learning_rate.initial_learning_rate = lr;
  return s;
}

}  // namespace

TEST_CASE("plain sgd steps against the gradient") {
  nn::Param p = param(1.0f, 0.5f);
  auto opt = optim::make_optimizer(spec("sgd", 0.1));
  opt->apply({&p}, 0);
  CHECK(p.value.data()[0] == Approx(0.95));
}

TEST_CASE("sgd with momentum and nesterov follows Keras' velocity formulas") {
  auto s = spec("sgd", 0.1);
  s.momentum = 0.9;
  nn::Param p = param(1.0f, 1.0f);
  auto opt = optim::make_optimizer(s);
  opt->apply({&p}, 0);  // v = -0.1, w = 0.9
  opt->apply({&p}, 1);  // v = -0.09 - 0.1 = -0.19, w = 0.71
  CHECK(p.value.data()[0] == Approx(0.71));
  s.nesterov = true;
  nn::Param q = param(1.0f, 1.0f);
  auto nag = optim::make_optimizer(s);
  nag->apply({&q}, 0);  // v = -0.1, w = 1 + 0.9 * -0.1 - 0.1 = 0.81
  CHECK(q.value.data()[0] == Approx(0.81));
}

TEST_CASE("adam's first steps move by about the learning rate") {
  nn::Param p = param(1.0f, 0.3f);
  auto opt = optim::make_optimizer(spec("adam", 0.01));
  opt->apply({&p}, 0);
  // m = 0.03, v = 0.00009, alpha = 0.01 * sqrt(0.001) / 0.1; step = alpha * m / (sqrt(v) + eps)
  const double alpha = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
  const double expected = 1.0 - alpha * 0.03 / (std::sqrt(0.00009) + 1e-7);
  CHECK(p.value.data()[0] == Approx(expected).epsilon(1e-6));
  CHECK(p.value.data()[0] == Approx(0.99).epsilon(1e-4));
  CHECK(opt->state().size() == 2);
}

TEST_CASE("adamw also decays the weight by lr * weight_decay") {
  auto s = spec("adamw", 0.01);
  s.weight_decay = 0.5;
  nn::Param p = param(2.0f, 0.0f);  // zero gradient: only the decay acts
  auto opt = optim::make_optimizer(s);
  opt->apply({&p}, 0);
  CHECK(p.value.data()[0] == Approx(2.0 * (1 - 0.005)));
}

TEST_CASE("learning-rate schedules: constant, step, cosine and warmup") {
  optim::LearningRateSpec lr;
  lr.initial_learning_rate = 0.1;
  CHECK(optim::learning_rate_at(lr, 1000) == Approx(0.1));
  lr.type = &optim::schedule_type("step");
  lr.decay_steps = 10;
  lr.decay_rate = 0.5;
  CHECK(optim::learning_rate_at(lr, 9) == Approx(0.1));
  CHECK(optim::learning_rate_at(lr, 10) == Approx(0.05));
  CHECK(optim::learning_rate_at(lr, 25) == Approx(0.025));
  lr.type = &optim::schedule_type("cosine");
  lr.decay_steps = 100;
  lr.alpha = 0.1;
  CHECK(optim::learning_rate_at(lr, 0) == Approx(0.1));
  CHECK(optim::learning_rate_at(lr, 50) == Approx(0.1 * (0.9 * 0.5 + 0.1)));
  CHECK(optim::learning_rate_at(lr, 500) == Approx(0.01));
  lr.warmup_steps = 4;
  CHECK(optim::learning_rate_at(lr, 0) == Approx(0.025));
  CHECK(optim::learning_rate_at(lr, 3) == Approx(0.1));
  CHECK(optim::learning_rate_at(lr, 4) == Approx(0.1));
}

namespace {

nn::ModelSpec small_model() {
  const config::Document doc(R"({"input_shape": [5], "layers": [
      {"type": "Dense", "units": 7, "activation": "relu"},
      {"type": "BatchNormalization"},
      {"type": "Dense", "units": 3, "activation": "relu"}]})",
                             "model");
  return nn::read_model_spec(doc.root());
}

// The same pseudo-random gradient for step `step` in every model.
void set_grads(nn::Sequential& model, int step) {
  Rng rng(static_cast<uint64_t>(step) + 77);
  for (nn::Param* p : model.trainable_params())
    for (int64_t i = 0; i < p->grad.numel(); ++i) p->grad.data()[i] = static_cast<float>(rng.uniform(-1, 1));
}

}  // namespace

TEST_CASE("one fused update over an arena gives the per-param updates bit for bit") {
  for (const char* type : {"adamw", "sgd"}) {
    CAPTURE(type);
    auto s = spec(type, 0.05);
    s.momentum = 0.9;
    nn::Sequential placed(small_model(), 3), loose(small_model(), 3);
    auto fused = optim::make_optimizer(s), plain = optim::make_optimizer(s);
    placed.place(Device::cpu(), fused->slots_per_param());
    fused->create_state(placed.trainable_params(), placed.arena());
    // The arena was sized exactly: values, grads, state and slots fill it.
    REQUIRE(placed.arena()->used() == placed.arena()->capacity());
    // Values and grads of the trainable params are each one range with one layout.
    const auto tp = placed.trainable_params();
    REQUIRE(tp.front()->value.shares_storage(tp.back()->grad));
    REQUIRE(tp.back()->value.data() - tp.front()->value.data() == tp.back()->grad.data() - tp.front()->grad.data());
    for (int step = 0; step < 4; ++step) {
      set_grads(placed, step);
      set_grads(loose, step);
      fused->apply(placed.trainable_params(), step);
      plain->apply(loose.trainable_params(), step);
    }
    REQUIRE(placed.params_sha256() == loose.params_sha256());
    const auto a = fused->state(), b = plain->state();
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); ++k)
      for (int64_t i = 0; i < a[k]->value.numel(); ++i) REQUIRE(a[k]->value.data()[i] == b[k]->value.data()[i]);
  }
}
