// Dynamic loss scaling through the real data-parallel strategy (float32 compute,
// scaling turned on with StrategyContext::loss_scaling), and gradients that
// travel as bfloat16 (strategy.allreduce_dtype):
//  - two multi_worker_mirrored ranks over Gloo on loopback TCP: an inf in ONE
//    rank's batch makes BOTH skip the step (parameters unchanged, scale halved
//    on both), the next step applies, and the run ends bit-identical to one
//    that never saw the poisoned step (the optimizer's step count skipped it too);
//  - scaling by a power of two is exact: a scaled run with gradient
//    accumulation equals the unscaled run bit for bit, and an inf in the first
//    micro-batch of an update skips that whole update;
//  - strategies and devices that cannot scale are ConfigErrors;
//  - two ranks with bfloat16 gradients learn like float32 ones, and the flight
//    recorder sees half the bytes.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "comm/flight_recorder.h"
#include "comm/gloo/gloo_communicator.h"
#include "core/error.h"
#include "rendezvous/store.h"
#include "strategy/registry.h"
#include "support/rank_threads.h"
#include "support/tiny_dense_job.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

// Rank `rank`'s half (4 rows) of step `step`'s 8-row batch; with `poison`, its
// first value is inf (the first layer's gradient becomes NaN: inf * tanh' of 0).
data::Batch half_batch(int64_t step, int rank, bool poison = false) {
  data::Batch b = test::tiny_dense_batch(step, 4 * rank, 4);
  if (poison) b.images.data()[0] = std::numeric_limits<float>::infinity();
  return b;
}

// What one rank saw after each step: its parameters' hash and the loss scale.
struct RankTrace {
  std::vector<std::string> hashes;
  std::vector<double> scales;
};

// Two multi_worker_mirrored ranks with loss scaling over Gloo, running the
// steps `batches` (a batch key each); rank 1's batch is poisoned at `poisoned`
// (-1: never). `extra`: more strategy keys.
std::vector<RankTrace> two_ranks(const std::vector<int64_t>& batches, int64_t poisoned,
                                 const std::string& prefix, const std::string& extra = "") {
  rendezvous::InMemoryStore store;
  std::vector<RankTrace> traces(2);
  test::check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
    comm::GlooOptions o;
    o.rank = rank;
    o.size = 2;
    o.prefix = prefix;
    o.timeout_seconds = 30.0;
    auto workers = comm::make_gloo_communicator(store, o);
    const job::JobConfig job = test::tiny_dense_job("multi_worker_mirrored", extra);
    strategy::StrategyContext context{workers.get(), 1};
    context.loss_scaling = true;
    auto s = strategy::make_strategy(job.strategy_job(), context);
    if (!s->loss_scale()) return "no loss scale";
    for (size_t step = 0; step < batches.size(); ++step) {
      nn::LossStats stats;
      const bool poison = rank == 1 && static_cast<int64_t>(step) == poisoned;
      s->train_step({half_batch(batches[step], rank, poison)}, static_cast<int64_t>(step), stats);
      traces[rank].hashes.push_back(s->model().params_sha256());
      traces[rank].scales.push_back(s->loss_scale()->scale());
    }
    return "";
  }));
  return traces;
}

}  // namespace

TEST_CASE("loss scaling: an inf on one worker makes both workers skip the step, the next one applies") {
  // Steps on batches 0..4; rank 1's batch of step 2 holds an inf.
  const std::vector<RankTrace> poisoned = two_ranks({0, 1, 2, 3, 4}, 2, "ls/poisoned/");
  // The same run without the poisoned step (batches 0, 1, 3, 4).
  const std::vector<RankTrace> clean = two_ranks({0, 1, 3, 4}, -1, "ls/clean/");
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const RankTrace& t = poisoned[rank];
    CHECK(t.hashes[2] == t.hashes[1]);  // skipped: parameters (and optimizer) untouched
    CHECK(t.hashes[3] != t.hashes[2]);  // the next finite step applies
    CHECK(t.scales[1] == 32768.0);
    CHECK(t.scales[2] == 16384.0);  // halved on both, though only rank 1 saw the inf
    CHECK(t.scales[4] == 16384.0);
    // Scaling by a power of two is exact, and the skipped step did not advance
    // Adam's step count: the run equals the one that never had step 2.
    CHECK(t.hashes[4] == clean[rank].hashes[3]);
    CHECK(clean[rank].scales[3] == 32768.0);
  }
  CHECK(poisoned[0].hashes == poisoned[1].hashes);
}

TEST_CASE("loss scaling is exact with gradient accumulation, and an inf in any micro-batch skips the update") {
  job::JobConfig job = test::tiny_dense_job("one_device");
  job.train.gradient_accumulation_steps = 2;
  const auto run = [&](bool scaling, int64_t poisoned_step) {
    strategy::StrategyContext context{nullptr, 1};
    context.loss_scaling = scaling;
    auto s = strategy::make_strategy(job.strategy_job(), context);
    std::vector<std::string> hashes;
    for (int64_t step = 0; step < 4; ++step) {
      data::Batch first = test::tiny_dense_batch(step, 0, 4), second = test::tiny_dense_batch(step, 4, 4);
      if (step == poisoned_step) first.images.data()[5] = -std::numeric_limits<float>::infinity();
      nn::LossStats stats;
      s->train_step({first, second}, step, stats);
      hashes.push_back(s->model().params_sha256());
    }
    if (scaling) hashes.push_back(std::to_string(s->loss_scale()->scale()));
    return hashes;
  };
  const std::vector<std::string> plain = run(false, -1), scaled = run(true, -1), poisoned = run(true, 1);
  REQUIRE(scaled.size() == 5);
  CHECK(std::vector<std::string>(scaled.begin(), scaled.end() - 1) == plain);  // bit for bit
  CHECK(scaled[4] == std::to_string(32768.0));
  CHECK(poisoned[1] == poisoned[0]);  // the inf was in the first micro-batch; the update is skipped
  CHECK(poisoned[2] != poisoned[1]);
  CHECK(poisoned[4] == std::to_string(16384.0));
}

// (mixed_float16 on the CPU: trainer/setup/job_setup.h's check_precision, tested through
// the binary in tests/integration/test_bad_input.cpp.)
TEST_CASE("mixed_float16 is a ConfigError with central_storage or parameter_server") {
  for (const char* type : {"central_storage", "parameter_server"}) {
    INFO(type);
    job::JobConfig job = test::tiny_dense_job(type);
    job.train.precision = config::Precision::kMixedFloat16;
    CHECK_THROWS_AS(strategy::make_strategy(job.strategy_job(), {nullptr, 1}), ConfigError);
    CHECK_THROWS_WITH(strategy::make_strategy(job.strategy_job(), {nullptr, 1}),
                      Contains("train.precision: mixed_float16") && Contains(type));
  }
}

TEST_CASE("allreduce_dtype bfloat16: two workers learn like float32 ones, with half the gradient bytes") {
  // Each rank trains 30 steps on its halves of two batches in turn; the loss
  // on the first of them, before and after, is compared.
  const auto train = [](const std::string& dtype) {
    rendezvous::InMemoryStore store;
    std::vector<double> first(2), last(2);
    std::vector<std::string> hashes(2);
    test::check_all_ok(test::run_on_threads(2, [&](int rank) -> std::string {
      comm::GlooOptions o;
      o.rank = rank;
      o.size = 2;
      o.prefix = "dtype/" + dtype + "/";
      o.timeout_seconds = 30.0;
      auto workers = comm::make_recorded(comm::make_gloo_communicator(store, o), dtype + "-grads");
      const job::JobConfig job =
          test::tiny_dense_job("multi_worker_mirrored", R"(, "allreduce_dtype": ")" + dtype + "\"");
      auto s = strategy::make_strategy(job.strategy_job(), {workers.get(), 1});
      for (int64_t step = 0; step < 30; ++step) {
        nn::LossStats stats;
        s->train_step({half_batch(step % 2, rank)}, step, stats);
        if (step == 0) first[rank] = stats.loss_sum / static_cast<double>(stats.count);
      }
      nn::LossStats eval;
      s->eval_step(test::tiny_dense_batch(0, 0, 8), eval);
      last[rank] = eval.loss_sum / static_cast<double>(eval.count);
      hashes[rank] = s->model().params_sha256();
      return "";
    }));
    CHECK(hashes[0] == hashes[1]);
    CHECK(last[0] == last[1]);
    return std::vector<double>{first[0], last[0]};
  };
  // The tiny model's 83 gradients travel in one bucket: in float32 at the places
  // the model's arena gives them (4 tensors, each padded to 64 floats: the last
  // one's 3 unpadded, 195 floats; plus 4 metrics riding along: 796 bytes, the
  // same whether a task reduces its arena in place or packs), 166 bytes in
  // bfloat16 (dense; the metrics then take an all-reduce of their own, in float32).
  const std::vector<double> f32 = train("float32");
  CHECK_THAT(comm::flight_record(), Contains("float32-grads all_reduce 796 bytes: completed"));
  const std::vector<double> bf16 = train("bfloat16");
  const std::string record = comm::flight_record();
  CHECK_THAT(record, Contains("bfloat16-grads all_reduce_bf16 166 bytes: completed"));
  CHECK_THAT(record, Contains("bfloat16-grads all_reduce 16 bytes: completed"));
  CHECK_THAT(record, !Contains("bfloat16-grads all_reduce 332 bytes"));
  CHECK(bf16[0] == Approx(f32[0]).epsilon(1e-6));  // the first step's loss is before any update
  CHECK(bf16[1] < bf16[0] * 0.9);                  // it learns
  CHECK(bf16[1] == Approx(f32[1]).epsilon(0.05));  // and like float32
}
