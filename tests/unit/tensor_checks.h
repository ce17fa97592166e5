// Test helpers for tensors: reproducible random inputs, an element-wise
// comparison |got - want| <= atol + rtol * |want| that names the first element
// outside it, and the relative distance of two float32 tensors. Tensors on a
// GPU are compared through host copies.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>

#include "core/rng.h"
#include "tensor/tensor.h"

namespace dtrain::testing {

inline Tensor random_tensor(Shape shape, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t(std::move(shape));
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(rng.uniform(lo, hi));
  return t;
}

inline void require_close(const Tensor& got_any, const Tensor& want_any, double atol = 1e-4, double rtol = 1e-4) {
  const Tensor got = got_any.to_host(), want = want_any.to_host();
  REQUIRE(got.numel() == want.numel());
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.data()[i], w = want.data()[i];
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
      INFO("element " << i << ": got " << g << ", want " << w);
      REQUIRE(std::fabs(g - w) <= atol + rtol * std::fabs(w));
    }
  }
}

// ||a - b|| / ||b|| (2-norms) of two float32 host tensors of the same size.
inline double relative_distance(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff += std::pow(double(a.data()[i]) - b.data()[i], 2);
    norm += std::pow(double(b.data()[i]), 2);
  }
  return std::sqrt(diff / norm);
}

}  // namespace dtrain::testing
