// all_reduce_bfloat16 (strategy.allreduce_dtype bfloat16): over real Gloo on 2 to
// 4 ranks the sums of non-integer data stay within bfloat16's rounding of the
// float32 sums, come out as bfloat16 values, identical on every rank; small
// integers sum exactly; an inf or NaN on one rank reaches all; the flight
// recorder counts 2 bytes per value. The fallback of communicators with no
// bfloat16 path (the local group) is the float32 sum of the rounded values,
// rounded once.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "comm/flight_recorder.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/local/local_communicator.h"
#include "core/rng.h"
#include "core/strings.h"
#include "rendezvous/store.h"
#include "support/rank_threads.h"
#include "tensor/bfloat16.h"

using namespace dtrain;

namespace {

// Rank r's value at i: in [-1, 1), not representable in bfloat16 as a rule.
float noise(int rank, size_t i) { return u64_to_unit_float(hash_u64(17, rank, i)) * 2.0f - 1.0f; }

bool is_bfloat16(float x) { return bf16_to_f32(f32_to_bf16(x)) == x; }

// Runs body(comm) on n ranks of a Gloo group over loopback TCP.
std::vector<std::string> on_gloo(int n, const std::string& prefix,
                                 const std::function<std::string(comm::Communicator&)>& body) {
  rendezvous::InMemoryStore store;
  return test::run_on_threads(n, [&](int rank) {
    comm::GlooOptions o;
    o.rank = rank;
    o.size = n;
    o.prefix = prefix;
    o.timeout_seconds = 30.0;
    auto gloo = comm::make_gloo_communicator(store, o);
    return body(*gloo);
  });
}

}  // namespace

TEST_CASE("gloo all_reduce_bfloat16 sums within bfloat16 tolerance of float32 on 2, 3 and 4 ranks") {
  constexpr size_t kCount = 3001;  // odd, and more than one of Gloo's ring chunks per rank
  const double unit = std::ldexp(1.0, -8);  // bfloat16's unit roundoff (8 significant bits)
  for (const int n : {2, 3, 4}) {
    INFO(n << " ranks");
    std::vector<std::vector<float>> sums(n), means(n);
    test::check_all_ok(on_gloo(n, str("bf16/", n, "/"), [&](comm::Communicator& c) -> std::string {
      std::vector<float> x(kCount), y(kCount);
      for (size_t i = 0; i < kCount; ++i) x[i] = y[i] = noise(c.rank(), i);
      c.all_reduce_bfloat16(x.data(), kCount, comm::ReduceOp::kSum);
      c.all_reduce_bfloat16(y.data(), kCount, comm::ReduceOp::kMean);
      sums[c.rank()] = x;
      means[c.rank()] = y;
      return "";
    }));
    for (int r = 1; r < n; ++r) {
      CHECK(sums[r] == sums[0]);  // every rank gets the same bits
      CHECK(means[r] == means[0]);
    }
    size_t off = 0;
    for (size_t i = 0; i < kCount; ++i) {
      double exact = 0.0, magnitude = 0.0;
      for (int r = 0; r < n; ++r) {
        exact += noise(r, i);
        magnitude += std::fabs(noise(r, i));
      }
      // n input roundings and n - 1 roundings of partial sums, each at most
      // `unit` relative to a value no larger than the sum of magnitudes.
      const double bound = 2.0 * n * unit * magnitude;
      if (std::fabs(sums[0][i] - exact) > bound || !is_bfloat16(sums[0][i]) ||
          means[0][i] != sums[0][i] / static_cast<float>(n))
        ++off;
    }
    CHECK(off == 0);
  }
}

TEST_CASE("gloo all_reduce_bfloat16: small integers are exact, an inf or NaN on one rank reaches every rank") {
  std::vector<std::vector<float>> got(3);
  test::check_all_ok(on_gloo(3, "bf16/special/", [&](comm::Communicator& c) -> std::string {
    std::vector<float> x = {static_cast<float>(c.rank() + 1), 100.0f, 0.0f, 1.0f};
    if (c.rank() == 1) x[2] = std::numeric_limits<float>::infinity();
    if (c.rank() == 2) x[3] = std::numeric_limits<float>::quiet_NaN();
    c.all_reduce_bfloat16(x.data(), x.size(), comm::ReduceOp::kSum);
    got[c.rank()] = x;
    return "";
  }));
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(got[r][0] == 6.0f);
    CHECK(got[r][1] == 300.0f);
    CHECK(std::isinf(got[r][2]));
    CHECK(std::isnan(got[r][3]));
  }
}

TEST_CASE("the flight recorder counts a bfloat16 all-reduce at 2 bytes per value, float32 at 4") {
  test::check_all_ok(on_gloo(2, "bf16/recorded/", [&](comm::Communicator& c) -> std::string {
    auto recorded = comm::make_recorded(comm::borrow(c), str("bf16-rank", c.rank()));
    std::vector<float> x(1000, 1.0f);
    recorded->all_reduce(x.data(), x.size(), comm::ReduceOp::kSum);
    recorded->all_reduce_bfloat16(x.data(), x.size(), comm::ReduceOp::kSum);
    return x[0] == 4.0f ? "" : str("sum ", x[0]);
  }));
  const std::string record = comm::flight_record();
  CHECK_THAT(record, Catch::Matchers::Contains("bf16-rank0 all_reduce 4000 bytes: completed"));
  CHECK_THAT(record, Catch::Matchers::Contains("bf16-rank0 all_reduce_bf16 2000 bytes: completed"));
}

TEST_CASE("the fallback (local group) sums the rounded values in float32 and rounds the sum once") {
  constexpr int kRanks = 3;
  auto group = comm::make_local_group(kRanks, 30.0);
  std::vector<std::vector<float>> got(kRanks);
  test::check_all_ok(test::run_on_threads(kRanks, [&](int rank) -> std::string {
    std::vector<float> x(257);
    for (size_t i = 0; i < x.size(); ++i) x[i] = noise(rank, i);
    group[rank]->all_reduce_bfloat16(x.data(), x.size(), comm::ReduceOp::kMean);
    got[rank] = x;
    return "";
  }));
  for (size_t i = 0; i < got[0].size(); ++i) {
    float sum = 0.0f;  // rank order, as the local group adds
    for (int r = 0; r < kRanks; ++r) sum += bf16_to_f32(f32_to_bf16(noise(r, i)));
    const float expected = bf16_to_f32(f32_to_bf16(sum)) / static_cast<float>(kRanks);
    for (int r = 0; r < kRanks; ++r) REQUIRE(got[r][i] == expected);
  }
}
