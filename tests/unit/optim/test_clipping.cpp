// Gradient clipping (clipnorm, global_clipnorm, clipvalue) against Keras' formulas
// computed by hand (and checked once against Keras 3.15: SGD(1.0) from zeros), on
// every optimizer; the clipping keys as read from a job's optimizer section.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/error.h"
#include "optim/optimizer.h"
#include "optim_test_util.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

using test::make_param;
const auto spec = test::optimizer_spec;

// One sgd step at lr 1 from zero weights with the gradients [3, 4] (norm 5) and
// [0.3, 0.4] (norm 0.5): the weights are minus the clipped gradients.
std::pair<std::vector<float>, std::vector<float>> clipped_sgd(const optim::OptimizerSpec& s) {
  nn::Param a = make_param("a", {0, 0}, {3, 4}), b = make_param("b", {0, 0}, {0.3f, 0.4f});
  optim::make_optimizer(s)->apply({&a, &b}, 0);
  return {{-a.value.data()[0], -a.value.data()[1]}, {-b.value.data()[0], -b.value.data()[1]}};
}

// Reads {"optimizer": <text>} as a job's optimizer section.
optim::OptimizerSpec read(const std::string& optimizer) {
  const config::Document doc("{\"optimizer\": " + optimizer + "}", "job.json");
  config::Section job(doc.root(), "the job");
  return optim::read_optimizer_spec(*job.find("optimizer"));
}

std::string read_error(const std::string& optimizer) {
  try {
    read(optimizer);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("clipnorm scales each gradient on its own to norm <= clipnorm") {
  // g * 1 / max(norm, 1): [3, 4] / 5 = [0.6, 0.8]; [0.3, 0.4] (norm 0.5) stays. Keras: [-0.6, -0.8], [-0.3, -0.4].
  auto s = spec("sgd", 1.0);
  s.clipnorm = 1.0;
  const auto [a, b] = clipped_sgd(s);
  CHECK(a[0] == Approx(0.6));
  CHECK(a[1] == Approx(0.8));
  CHECK(b[0] == Approx(0.3));
  CHECK(b[1] == Approx(0.4));
}

TEST_CASE("global_clipnorm scales all gradients by one factor to a global norm <= global_clipnorm") {
  // global norm sqrt(25 + 0.25) = 5.024938; factor 1 / 5.024938 = 0.199007:
  // [0.597022, 0.796030] and [0.059702, 0.079603]. Keras: [-0.59702235, -0.7960298], [-0.05970224, -0.07960298].
  auto s = spec("sgd", 1.0);
  s.global_clipnorm = 1.0;
  const auto [a, b] = clipped_sgd(s);
  const double factor = 1.0 / std::sqrt(25.25);
  CHECK(a[0] == Approx(3 * factor));
  CHECK(a[1] == Approx(4 * factor));
  CHECK(b[0] == Approx(0.3 * factor));
  CHECK(b[1] == Approx(0.4 * factor));
  CHECK(a[0] == Approx(0.59702235).epsilon(1e-6));
  CHECK(b[1] == Approx(0.07960298).epsilon(1e-6));
  // A global norm already below the limit changes nothing.
  s.global_clipnorm = 10.0;
  const auto [c, d] = clipped_sgd(s);
  CHECK(c[1] == Approx(4.0));
  CHECK(d[0] == Approx(0.3));
}

TEST_CASE("clipvalue clips each element to [-clipvalue, clipvalue]") {
  // [3, 4] -> [0.5, 0.5]; [0.3, 0.4] stays. Keras: [-0.5, -0.5], [-0.3, -0.4].
  auto s = spec("sgd", 1.0);
  s.clipvalue = 0.5;
  const auto [a, b] = clipped_sgd(s);
  CHECK(a[0] == Approx(0.5));
  CHECK(a[1] == Approx(0.5));
  CHECK(b[0] == Approx(0.3));
  CHECK(b[1] == Approx(0.4));
  nn::Param n = make_param("n", {0, 0, 0}, {-3.0f, 0.2f, -0.7f});
  optim::make_optimizer(s)->apply({&n}, 0);
  CHECK(n.value.data()[0] == Approx(0.5));  // -(-0.5)
  CHECK(n.value.data()[1] == Approx(-0.2));
  CHECK(n.value.data()[2] == Approx(0.5));
}

TEST_CASE("every optimizer clips before its update: the same as feeding it the clipped gradient") {
  for (const optim::OptimizerType& type : optim::optimizer_types()) {
    CAPTURE(type.name);
    for (int option = 0; option < 3; ++option) {
      CAPTURE(option);
      auto clipping = spec(type.name, 0.1);
      if (option == 0) clipping.clipnorm = 1.0;
      if (option == 1) clipping.global_clipnorm = 1.0;
      if (option == 2) clipping.clipvalue = 0.5;
      // One param: clipnorm and global_clipnorm both give [0.6, 0.8]; clipvalue [0.5, 0.5].
      const std::vector<float> clipped = option == 2 ? std::vector<float>{0.5f, 0.5f} : std::vector<float>{0.6f, 0.8f};
      nn::Param a = make_param("a", {1, -1}, {3, 4}), b = make_param("b", {1, -1}, clipped);
      auto with = optim::make_optimizer(clipping), without = optim::make_optimizer(spec(type.name, 0.1));
      for (int step = 0; step < 2; ++step) {
        a.grad.data()[0] = 3;
        a.grad.data()[1] = 4;
        with->apply({&a}, step);
        without->apply({&b}, step);
      }
      CHECK(a.value.data()[0] == Approx(b.value.data()[0]).epsilon(1e-6));
      CHECK(a.value.data()[1] == Approx(b.value.data()[1]).epsilon(1e-6));
    }
  }
}

TEST_CASE("a NaN gradient makes every gradient NaN under global_clipnorm, as in Keras") {
  auto s = spec("sgd", 1.0);
  s.global_clipnorm = 1.0;
  nn::Param a = make_param("a", {0, 0}, {NAN, 1}), b = make_param("b", {0}, {1});
  optim::make_optimizer(s)->apply({&a, &b}, 0);
  CHECK(std::isnan(b.value.data()[0]));
}

TEST_CASE("the clipping keys are read on every optimizer, at most one of them") {
  const optim::OptimizerSpec s = read(R"({"type": "rmsprop", "global_clipnorm": 2.5})");
  CHECK(s.global_clipnorm == Approx(2.5));
  CHECK(s.clipnorm == 0.0);
  CHECK(s.clipvalue == 0.0);
  CHECK(read(R"({"type": "sgd", "clipnorm": 1})").clipnorm == Approx(1.0));
  CHECK(read(R"({"type": "adagrad", "clipvalue": 0.1})").clipvalue == Approx(0.1));
  CHECK_THAT(read_error(R"({"type": "adam", "clipnorm": 1.0, "global_clipnorm": 1.0})"),
             Contains("optimizer.global_clipnorm: only one of 'clipnorm', 'clipvalue' and 'global_clipnorm' may "
                      "be set (Keras raises too), got 'clipnorm' and 'global_clipnorm'; keep one of them"));
  CHECK_THAT(read_error(R"({"type": "sgd", "clipnorm": 1.0, "clipvalue": 0.5})"),
             Contains("got 'clipnorm' and 'clipvalue'"));
  CHECK_THAT(read_error(R"({"type": "sgd", "clipnorm": 0})"),
             Contains("optimizer.clipnorm: must be a positive number, got 0"));
  CHECK_THAT(read_error(R"({"type": "sgd", "clipvalue": -1})"), Contains("optimizer.clipvalue"));
  CHECK_THAT(read_error(R"({"type": "sgd", "clip_norm": 1})"), Contains("did you mean 'clipnorm'?"));
}

TEST_CASE("a ps's optimizer does not clip: its workers did") {
  auto s = spec("sgd", 1.0);
  s.clipnorm = 0.1;
  CHECK(optim::clips(s));
  const optim::OptimizerSpec plain = optim::without_clipping(s);
  CHECK_FALSE(optim::clips(plain));
  nn::Param a = make_param("a", {0, 0}, {3, 4});
  optim::make_optimizer(plain)->apply({&a}, 0);
  CHECK(a.value.data()[1] == Approx(-4.0));
}
