// The learning-rate schedules exponential_decay, piecewise_constant and
// polynomial_decay against Keras' formulas computed by hand (the numbers quoted
// were checked once against keras.optimizers.schedules in Keras 3.15), and their
// keys as read from a job's optimizer section.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/error.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

optim::LearningRateSpec schedule(const std::string& type, double initial) {
  optim::LearningRateSpec lr;
  lr.type = &optim::schedule_type(type);
  lr.initial_learning_rate = initial;
  return lr;
}

// Reads {"optimizer": {"type": "sgd", "learning_rate": <text>}} as a job's section.
optim::LearningRateSpec read(const std::string& learning_rate) {
  const config::Document doc(R"({"optimizer": {"type": "sgd", "learning_rate": )" + learning_rate + "}}", "job.json");
  config::Section job(doc.root(), "the job");
  return optim::read_optimizer_spec(*job.find("optimizer")).learning_rate;
}

std::string read_error(const std::string& learning_rate) {
  try {
    read(learning_rate);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("exponential_decay: initial * decay_rate^(s / decay_steps), floored when staircase") {
  // 0.1 * 0.5^(s / 10): s 0 -> 0.1, 5 -> 0.0707107, 10 -> 0.05, 25 -> 0.0176777 (Keras: the same).
  auto lr = schedule("exponential_decay", 0.1);
  lr.decay_steps = 10;
  lr.decay_rate = 0.5;
  CHECK(optim::learning_rate_at(lr, 0) == Approx(0.1));
  CHECK(optim::learning_rate_at(lr, 5) == Approx(0.1 * std::sqrt(0.5)));
  CHECK(optim::learning_rate_at(lr, 10) == Approx(0.05));
  CHECK(optim::learning_rate_at(lr, 25) == Approx(0.0176777).epsilon(1e-5));
  // staircase: 0.5^floor(s / 10): 5 -> 0.1, 25 -> 0.025.
  lr.staircase = true;
  CHECK(optim::learning_rate_at(lr, 5) == Approx(0.1));
  CHECK(optim::learning_rate_at(lr, 25) == Approx(0.025));
}

TEST_CASE("piecewise_constant: values[i] up to and including boundaries[i]") {
  // boundaries [10, 20], values [1.0, 0.5, 0.1]: s <= 10 -> 1.0, 10 < s <= 20 -> 0.5, s > 20 -> 0.1.
  // Keras at s = 0, 10, 11, 20, 21, 1000: 1.0, 1.0, 0.5, 0.5, 0.1, 0.1.
  auto lr = schedule("piecewise_constant", 1.0);
  lr.boundaries = {10, 20};
  lr.values = {1.0, 0.5, 0.1};
  CHECK(optim::learning_rate_at(lr, 0) == Approx(1.0));
  CHECK(optim::learning_rate_at(lr, 10) == Approx(1.0));  // exactly at a boundary: the value before it
  CHECK(optim::learning_rate_at(lr, 11) == Approx(0.5));
  CHECK(optim::learning_rate_at(lr, 20) == Approx(0.5));
  CHECK(optim::learning_rate_at(lr, 21) == Approx(0.1));
  CHECK(optim::learning_rate_at(lr, 1000) == Approx(0.1));
  // A warmup of 4 steps ramps to values[0], then s counts from its end.
  lr.warmup_steps = 4;
  CHECK(optim::learning_rate_at(lr, 0) == Approx(0.25));
  CHECK(optim::learning_rate_at(lr, 4) == Approx(1.0));
  CHECK(optim::learning_rate_at(lr, 14) == Approx(1.0));
  CHECK(optim::learning_rate_at(lr, 15) == Approx(0.5));
}

TEST_CASE("polynomial_decay: to end_learning_rate over decay_steps, then held, or cycled") {
  // (0.1 - 0.01) * (1 - min(s, 10) / 10)^2 + 0.01: s 0 -> 0.1, 5 -> 0.0325, 10 -> 0.01, 15 -> 0.01.
  auto lr = schedule("polynomial_decay", 0.1);
  lr.decay_steps = 10;
  lr.end_learning_rate = 0.01;
  lr.power = 2.0;
  CHECK(optim::learning_rate_at(lr, 0) == Approx(0.1));
  CHECK(optim::learning_rate_at(lr, 5) == Approx(0.0325));
  CHECK(optim::learning_rate_at(lr, 10) == Approx(0.01));
  CHECK(optim::learning_rate_at(lr, 15) == Approx(0.01));
  // cycle: decay over 10 * ceil(s / 10) steps (10 at s = 0):
  //   s 15 -> over 20: p = 0.75, 0.09 * 0.0625 + 0.01 = 0.015625
  //   s 20 -> over 20: p = 1, 0.01;  s 21 -> over 30: p = 0.7, 0.09 * 0.09 + 0.01 = 0.0181
  // Keras at s = 0, 5, 10, 15, 20, 21: 0.1, 0.0325, 0.01, 0.015625, 0.01, 0.0181.
  lr.cycle = true;
  CHECK(optim::learning_rate_at(lr, 0) == Approx(0.1));
  CHECK(optim::learning_rate_at(lr, 5) == Approx(0.0325));
  CHECK(optim::learning_rate_at(lr, 10) == Approx(0.01));
  CHECK(optim::learning_rate_at(lr, 15) == Approx(0.015625));
  CHECK(optim::learning_rate_at(lr, 20) == Approx(0.01));
  CHECK(optim::learning_rate_at(lr, 21) == Approx(0.0181));
}

TEST_CASE("the new schedules read from a job, with Keras' defaults") {
  const auto e = read(R"({"type": "exponential_decay", "initial_learning_rate": 0.1, "decay_steps": 100,
                          "decay_rate": 0.96})");
  CHECK(e.decay_steps == 100);
  CHECK(e.decay_rate == Approx(0.96));
  CHECK_FALSE(e.staircase);
  const auto p = read(R"({"type": "piecewise_constant", "boundaries": [100, 200], "values": [0.1, 0.01, 0.001]})");
  CHECK(p.boundaries == std::vector<int64_t>{100, 200});
  CHECK(p.values.size() == 3);
  CHECK(p.initial_learning_rate == Approx(0.1));
  CHECK(optim::learning_rate_at(p, 150) == Approx(0.01));
  const auto q = read(R"({"type": "polynomial_decay", "initial_learning_rate": 0.1, "decay_steps": 50})");
  CHECK(q.end_learning_rate == Approx(0.0001));
  CHECK(q.power == Approx(1.0));
  CHECK_FALSE(q.cycle);
  CHECK(optim::learning_rate_at(q, 25) == Approx((0.1 - 0.0001) * 0.5 + 0.0001));
}

TEST_CASE("bad schedule keys are ConfigErrors naming the key") {
  CHECK_THAT(read_error(R"({"type": "exponential_decay", "initial_learning_rate": 0.1, "decay_steps": 10})"),
             Contains("optimizer.learning_rate: an exponential_decay learning-rate schedule needs 'decay_rate'"));
  CHECK_THAT(read_error(R"({"type": "piecewise_constant", "boundaries": [10], "values": [0.1, 0.01],
                           "initial_learning_rate": 0.1})"),
             Contains("unknown key 'initial_learning_rate' for a piecewise_constant learning-rate schedule; a "
                      "piecewise_constant schedule takes its rates from 'values'"));
  CHECK_THAT(read_error(R"({"type": "piecewise_constant", "boundaries": [10, 20], "values": [0.1, 0.01]})"),
             Contains("optimizer.learning_rate.values: expected 3 values, one more than the 2 boundaries"));
  CHECK_THAT(read_error(R"({"type": "piecewise_constant", "boundaries": [20, 10], "values": [1, 2, 3]})"),
             Contains("optimizer.learning_rate.boundaries[1]: boundaries must increase strictly: 10 follows 20"));
  CHECK_THAT(read_error(R"({"type": "piecewise_constant", "boundaries": [], "values": [1]})"),
             Contains("optimizer.learning_rate.boundaries: expected a non-empty array"));
  CHECK_THAT(read_error(R"({"type": "piecewise_constant", "values": [1, 2]})"),
             Contains("a piecewise_constant learning-rate schedule needs 'boundaries'"));
  CHECK_THAT(read_error(R"({"type": "piecewise_constant", "boundaries": [5], "values": [1, -2]})"),
             Contains("optimizer.learning_rate.values[1]"));
  CHECK_THAT(read_error(R"({"type": "polynomial_decay", "initial_learning_rate": 0.1, "decay_steps": 0})"),
             Contains("optimizer.learning_rate.decay_steps"));
  CHECK_THAT(read_error(R"({"type": "polynomial_decay", "initial_learning_rate": 0.1, "decay_steps": 5,
                           "staircase": true})"),
             Contains("'staircase' belongs to exponential_decay schedules"));
}
