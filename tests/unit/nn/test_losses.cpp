// Losses: values and gradients against hand-computed numbers, accuracy counting.
#include <catch2/catch.hpp>
#include <cmath>

#include "core/error.h"
#include "nn/losses.h"

using namespace dtrain;

namespace {

Tensor row(std::vector<float> v) {
  Tensor t({1, static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data());
  return t;
}

std::unique_ptr<nn::Loss> loss(const std::string& type, bool from_logits) {
  nn::LossSpec s;
  s.type = &nn::loss_type(type);
  s.from_logits = from_logits;
  return nn::make_loss(s);
}

}  // namespace

TEST_CASE("sparse cross-entropy from logits is log-sum-exp minus the label's logit") {
  const Tensor logits = row({1.0f, 2.0f, 3.0f});
  Tensor grad({1, 3});
  nn::LossStats s;
  loss("sparse_categorical_crossentropy", true)->compute(logits, {0}, s, &grad, 1.0f);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(s.loss_sum == Approx(lse - 1.0));
  CHECK(s.correct == 0);
  CHECK(grad.data()[0] == Approx(std::exp(1.0 - lse) - 1.0));
  CHECK(grad.data()[2] == Approx(std::exp(3.0 - lse)));
}

TEST_CASE("cross-entropy from logits stays finite for huge logits") {
  const Tensor logits = row({1000.0f, -1000.0f});
  nn::LossStats s;
  loss("sparse_categorical_crossentropy", true)->compute(logits, {1}, s, nullptr, 0);
  CHECK(s.loss_sum == Approx(2000.0));
}

TEST_CASE("cross-entropy on probabilities clips them like Keras") {
  nn::LossStats s;
  Tensor grad({1, 2});
  loss("categorical_crossentropy", false)->compute(row({0.25f, 0.75f}), {1}, s, &grad, 0.5f);
  CHECK(s.loss_sum == Approx(-std::log(0.75)));
  CHECK(s.correct == 1);
  CHECK(grad.data()[1] == Approx(-0.5 / 0.75));
  CHECK(grad.data()[0] == 0.0f);
  nn::LossStats zero;
  loss("sparse_categorical_crossentropy", false)->compute(row({1.0f, 0.0f}), {1}, zero, nullptr, 0);
  CHECK(zero.loss_sum == Approx(-std::log(1e-7)).epsilon(1e-3));
}

TEST_CASE("mse compares against the one-hot label, averaged over classes") {
  nn::LossStats s;
  Tensor grad({1, 2});
  loss("mse", false)->compute(row({0.5f, 0.5f}), {0}, s, &grad, 1.0f);
  CHECK(s.loss_sum == Approx(0.25));
  CHECK(grad.data()[0] == Approx(-0.5));
  CHECK(grad.data()[1] == Approx(0.5));
}

TEST_CASE("accuracy counts argmax hits over a batch") {
  Tensor out({3, 2});
  const float v[] = {0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f};
  std::copy(v, v + 6, out.data());
  nn::LossStats s;
  loss("mse", false)->compute(out, {1, 1, 1}, s, nullptr, 0);
  CHECK(s.correct == 2);
  CHECK(s.count == 3);
}

TEST_CASE("an unknown loss type lists the valid ones") {
  REQUIRE_THROWS_WITH(loss("hinge", false), Catch::Contains("sparse_categorical_crossentropy") &&
                                                 Catch::Contains("'hinge'"));
}
