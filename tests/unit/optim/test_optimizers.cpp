// Optimizers and schedules against Keras' update formulas, computed by hand (and
// checked once against Keras 3.15 in Python: the numbers quoted in comments).
#include <catch2/catch.hpp>
#include <cmath>

#include "core/rng.h"
#include "nn/sequential.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim_test_util.h"

using namespace dtrain;

namespace {

nn::Param param(float w, float g) { return test::make_param("w", {w}, {g}); }

// A 2-element weight [w0, w1] with the gradient [g0, g1].
nn::Param param2(float w0, float w1, float g0, float g1) { return test::make_param("w", {w0, w1}, {g0, g1}); }

const auto spec = test::optimizer_spec;

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

TEST_CASE("rmsprop: two steps on a 2-element weight follow Keras' formulas") {
  // lr 0.1, rho 0.9, eps 1e-7, w = [1, -2], g = [0.5, -1] on both steps:
  //   step 1: v = 0.1 g^2 = [0.025, 0.1];            w -= 0.1 g / sqrt(v + eps) = [0.316228, -0.316228]
  //   step 2: v = 0.9 v + 0.1 g^2 = [0.0475, 0.19];  w -= 0.1 g / sqrt(v + eps) = [0.229416, -0.229416]
  //   w = [0.454357, -1.454357]   (Keras 3.15 RMSprop(0.1): [0.45435736, -1.4543567])
  nn::Param p = param2(1.0f, -2.0f, 0.5f, -1.0f);
  auto opt = optim::make_optimizer(spec("rmsprop", 0.1));
  CHECK(opt->slots_per_param() == 1);
  opt->apply({&p}, 0);
  opt->apply({&p}, 1);
  const double w0 = 1.0 - 0.05 / std::sqrt(0.025 + 1e-7) - 0.05 / std::sqrt(0.0475 + 1e-7);
  const double w1 = -2.0 + 0.1 / std::sqrt(0.1 + 1e-7) + 0.1 / std::sqrt(0.19 + 1e-7);
  CHECK(p.value.data()[0] == Approx(w0).epsilon(1e-6));
  CHECK(p.value.data()[1] == Approx(w1).epsilon(1e-6));
  CHECK(p.value.data()[0] == Approx(0.45435736).epsilon(1e-6));
  CHECK(p.value.data()[1] == Approx(-1.4543567).epsilon(1e-6));
  const auto state = opt->state();
  REQUIRE(state.size() == 1);
  CHECK(state[0]->name == "w/velocity");
  CHECK(state[0]->value.data()[1] == Approx(0.19));
}

TEST_CASE("rmsprop centered divides by the variance estimate, with momentum it keeps a velocity") {
  // centered, w = 1, g = 0.5, lr 0.1:
  //   step 1: v = 0.025, a = 0.05,  d = v - a^2 + eps = 0.0225;   w -= 0.05 / 0.15     -> 0.666667
  //   step 2: v = 0.0475, a = 0.095, d = 0.0475 - 0.009025 = 0.038475; w -= 0.05 / 0.196150 -> 0.411761
  //   (Keras: 0.41176134)
  auto centered = spec("rmsprop", 0.1);
  centered.centered = true;
  nn::Param p = param(1.0f, 0.5f);
  auto opt = optim::make_optimizer(centered);
  opt->apply({&p}, 0);
  opt->apply({&p}, 1);
  CHECK(p.value.data()[0] == Approx(1.0 - 0.05 / std::sqrt(0.0225 + 1e-7) - 0.05 / std::sqrt(0.038475 + 1e-7)));
  CHECK(p.value.data()[0] == Approx(0.41176134).epsilon(1e-6));
  REQUIRE(opt->state().size() == 2);
  CHECK(opt->state()[1]->name == "w/average_gradient");
  CHECK(opt->state()[1]->value.data()[0] == Approx(0.095));

  // momentum 0.5, w = 1, g = 0.5, lr 0.1: the steps 0.316228 and 0.229416 of the plain case;
  //   m = 0.316228, w = 0.683772;  m = 0.5 * 0.316228 + 0.229416 = 0.387530, w = 0.296242  (Keras: 0.2962438)
  auto with_momentum = spec("rmsprop", 0.1);
  with_momentum.momentum = 0.5;
  nn::Param q = param(1.0f, 0.5f);
  auto mopt = optim::make_optimizer(with_momentum);
  mopt->apply({&q}, 0);
  mopt->apply({&q}, 1);
  const double step1 = 0.05 / std::sqrt(0.025 + 1e-7), step2 = 0.05 / std::sqrt(0.0475 + 1e-7);
  CHECK(q.value.data()[0] == Approx(1.0 - step1 - (0.5 * step1 + step2)));
  CHECK(q.value.data()[0] == Approx(0.2962438).epsilon(1e-6));

  // Both: slots velocity, momentum, average_gradient, in Keras' order. Keras: [0.24509504, -1.2450941].
  auto both = with_momentum;
  both.centered = true;
  nn::Param r = param2(1.0f, -2.0f, 0.5f, -1.0f);
  auto bopt = optim::make_optimizer(both);
  CHECK(bopt->slots_per_param() == 3);
  bopt->apply({&r}, 0);
  bopt->apply({&r}, 1);
  CHECK(r.value.data()[0] == Approx(0.24509504).epsilon(1e-6));
  CHECK(r.value.data()[1] == Approx(-1.2450941).epsilon(1e-6));
  const auto state = bopt->state();
  REQUIRE(state.size() == 3);
  CHECK(state[0]->name == "w/velocity");
  CHECK(state[1]->name == "w/momentum");
  CHECK(state[2]->name == "w/average_gradient");
}

TEST_CASE("adagrad's accumulator starts at initial_accumulator_value") {
  // lr 0.1, initial 0.1, eps 1e-7, w = [1, -2], g = [0.5, -1] on both steps:
  //   step 1: a = 0.1 + g^2 = [0.35, 1.1];  w -= 0.1 g / sqrt(a + eps) = [0.084515, -0.095346]
  //   step 2: a = [0.6, 2.1];               w -= [0.064550, -0.069007]
  //   w = [0.850935, -1.835647]   (Keras 3.15 Adagrad(0.1): [0.85093486, -1.8356472])
  nn::Param p = param2(1.0f, -2.0f, 0.5f, -1.0f);
  auto opt = optim::make_optimizer(spec("adagrad", 0.1));
  opt->create_state({&p});
  REQUIRE(opt->state().size() == 1);
  CHECK(opt->state()[0]->name == "w/accumulator");
  CHECK(opt->state()[0]->value.data()[1] == Approx(0.1));
  opt->apply({&p}, 0);
  opt->apply({&p}, 1);
  CHECK(p.value.data()[0] == Approx(1.0 - 0.05 / std::sqrt(0.35 + 1e-7) - 0.05 / std::sqrt(0.6 + 1e-7)));
  CHECK(p.value.data()[1] == Approx(-2.0 + 0.1 / std::sqrt(1.1 + 1e-7) + 0.1 / std::sqrt(2.1 + 1e-7)));
  CHECK(p.value.data()[0] == Approx(0.85093486).epsilon(1e-6));
  CHECK(p.value.data()[1] == Approx(-1.8356472).epsilon(1e-6));
  CHECK(opt->state()[0]->value.data()[0] == Approx(0.6));
}

TEST_CASE("rmsprop and adagrad read from a job with Keras' defaults") {
  const auto read = [](const std::string& optimizer) {
    const config::Document doc("{\"optimizer\": " + optimizer + "}", "job.json");
    config::Section job(doc.root(), "the job");
    return optim::read_optimizer_spec(*job.find("optimizer"));
  };
  const optim::OptimizerSpec r = read(R"("rmsprop")");
  CHECK(r.learning_rate.initial_learning_rate == Approx(0.001));
  CHECK(r.rho == Approx(0.9));
  CHECK(r.momentum == 0.0);
  CHECK(r.epsilon == Approx(1e-7));
  CHECK_FALSE(r.centered);
  const optim::OptimizerSpec a = read(R"("adagrad")");
  CHECK(a.learning_rate.initial_learning_rate == Approx(0.001));
  CHECK(a.initial_accumulator_value == Approx(0.1));
  CHECK(a.epsilon == Approx(1e-7));
  const optim::OptimizerSpec c =
      read(R"({"type": "rmsprop", "rho": 0.95, "momentum": 0.5, "centered": true, "epsilon": 1e-6})");
  CHECK(c.rho == Approx(0.95));
  CHECK(c.momentum == Approx(0.5));
  CHECK(c.centered);
  CHECK(optim::make_optimizer(c)->slots_per_param() == 3);
  CHECK(read(R"({"type": "adagrad", "initial_accumulator_value": 0})").initial_accumulator_value == 0.0);
  CHECK_THROWS_WITH(read(R"({"type": "rmsprop", "rho": 1.0})"),
                    Catch::Contains("optimizer.rho: must be a number in [0, 1), got 1.0"));
  CHECK_THROWS_WITH(read(R"({"type": "adagrad", "initial_accumulator_value": -0.1})"),
                    Catch::Contains("optimizer.initial_accumulator_value"));
  CHECK_THROWS_WITH(read(R"({"type": "adagrad", "rho": 0.9})"),
                    Catch::Contains("'rho' belongs to rmsprop optimizers"));
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
  for (const char* type : {"adamw", "sgd", "rmsprop", "adagrad"}) {
    CAPTURE(type);
    auto s = spec(type, 0.05);
    s.momentum = 0.9;
    s.centered = true;  // rmsprop: all three slots
    s.global_clipnorm = 0.5;  // and clipped gradients
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
