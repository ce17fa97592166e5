// Losses: values and gradients against hand-computed numbers, accuracy counting;
// a sequence's (N, T, C) output: the mean over every position, its gradient
// against finite differences, samples and tokens counted apart.
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
  CHECK(s.tokens == 3);  // one label position per sample
}

TEST_CASE("a sequence's (N, T, C) output: the loss is the mean over every position, as Keras takes it") {
  constexpr int64_t n = 2, t = 3, c = 5;
  Tensor out({n, t, c});
  for (int64_t i = 0; i < out.numel(); ++i) out.data()[i] = std::sin(0.7f * static_cast<float>(i)) * 2.0f;
  const std::vector<int32_t> labels = {4, 0, 2, 1, 1, 3};  // sample by sample, position by position
  for (const char* type : {"sparse_categorical_crossentropy", "mse"}) {
    INFO(type);
    const auto l = loss(type, true);
    // Each position alone, as a row of a (N*T, C) output.
    double sum = 0.0;
    int64_t hits = 0;
    for (int64_t r = 0; r < n * t; ++r) {
      Tensor one({1, c});
      std::copy_n(out.data() + r * c, c, one.data());
      nn::LossStats s;
      l->compute(one, {labels[static_cast<size_t>(r)]}, s, nullptr, 0.0f);
      sum += s.loss_sum;
      hits += s.correct;
    }
    nn::LossStats stats;
    Tensor grad({n, t, c});
    // The strategies' per-sample scale: the gradient of the mean over the batch.
    l->compute(out, labels, stats, &grad, 1.0f / static_cast<float>(n));
    CHECK(stats.count == n);
    CHECK(stats.tokens == n * t);
    CHECK(stats.correct == hits);
    CHECK(stats.loss_sum == Approx(sum).epsilon(1e-6));
    const double mean = stats.loss_sum / static_cast<double>(stats.tokens);
    CHECK(mean == Approx(sum / (n * t)));

    // The gradient is d(mean over all N*T positions)/d(output): central differences.
    const auto mean_loss = [&](const Tensor& x) {
      nn::LossStats s;
      l->compute(x, labels, s, nullptr, 0.0f);
      return s.loss_sum / static_cast<double>(s.tokens);
    };
    for (int64_t i = 0; i < out.numel(); ++i) {
      const float h = 1e-2f;
      Tensor plus = out.clone(), minus = out.clone();
      plus.data()[i] += h;
      minus.data()[i] -= h;
      const double numeric = (mean_loss(plus) - mean_loss(minus)) / (2.0 * h);
      INFO("element " << i);
      CHECK(grad.data()[i] == Approx(numeric).margin(2e-4));
    }
  }
}

TEST_CASE("a sequence of one position gives exactly the (N, C) result") {
  Tensor flat({4, 3}), seq({4, 1, 3});
  for (int64_t i = 0; i < 12; ++i) flat.data()[i] = seq.data()[i] = std::cos(1.3f * static_cast<float>(i));
  const std::vector<int32_t> labels = {0, 2, 1, 2};
  Tensor g_flat({4, 3}), g_seq({4, 1, 3});
  nn::LossStats a, b;
  loss("sparse_categorical_crossentropy", true)->compute(flat, labels, a, &g_flat, 0.25f);
  loss("sparse_categorical_crossentropy", true)->compute(seq, labels, b, &g_seq, 0.25f);
  CHECK(a.loss_sum == b.loss_sum);
  CHECK(a.count == b.count);
  CHECK(a.tokens == b.tokens);
  for (int64_t i = 0; i < 12; ++i) CHECK(g_flat.data()[i] == g_seq.data()[i]);
}

TEST_CASE("an unknown loss type lists the valid ones") {
  REQUIRE_THROWS_WITH(loss("hinge", false), Catch::Contains("sparse_categorical_crossentropy") &&
                                                 Catch::Contains("'hinge'"));
}
