// Deterministic random numbers that give the same values on every platform.
//
// std::uniform_real_distribution and friends are implementation-defined, so
// dtrain derives floats from a SplitMix64 stream itself. hash_u64() gives
// counter-based randomness (the same value for the same key, in any thread
// order), which dropout and the data shuffle use.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace dtrain {

// SplitMix64 finaliser: a good 64-bit mix of one word.
DT_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A hash of several words, for counter-based randomness.
DT_HOST_DEVICE inline uint64_t hash_u64(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  return mix64(mix64(mix64(mix64(a) ^ b) ^ c) ^ d);
}

// The top 24 bits of a word as a float in [0, 1).
DT_HOST_DEVICE inline float u64_to_unit_float(uint64_t x) { return static_cast<float>(x >> 40) * (1.0f / 16777216.0f); }

// Inverted dropout's multiplier for element i of the stream `seed`: 0 with
// probability `rate`, else 1 / (1 - rate). A pure function of (seed, i), so the
// CPU and GPU backends, and a layer's forward and backward passes, agree.
DT_HOST_DEVICE inline float dropout_multiplier(uint64_t seed, uint64_t i, float rate) {
  return u64_to_unit_float(hash_u64(seed, i)) < rate ? 0.0f : 1.0f / (1.0f - rate);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(mix64(seed)) {}

  uint64_t next_u64() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, 1) with 53 bits of precision.
  double uniform() { return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

  // Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias negligible for n << 2^64).
  uint64_t below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next_u64()) * n) >> 64);
  }

  // Standard normal (Box-Muller).
  double normal() {
    double u1 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace dtrain
