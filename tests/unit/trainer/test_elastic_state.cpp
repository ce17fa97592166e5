// ElasticState (trainer/elastic_state.h): a snapshot taken after a step holds
// that step's parameters and Adam slots, not later ones; restore() over a group
// gives every member the source's state and position, also a member one step
// behind and a member that never captured anything (its layout comes from the
// source's text); the loss scale and the epoch's figures travel with it.
#include <catch2/catch.hpp>
#include <thread>

#include "comm/local/local_communicator.h"
#include "strategy/strategy.h"
#include "support/tiny_dense_job.h"
#include "trainer/elastic_state.h"

using namespace dtrain;

namespace {

std::unique_ptr<strategy::Strategy> one_device(const job::JobConfig& job) {
  strategy::StrategyContext context;
  context.loss_scaling = true;
  return strategy::make_strategy(job.strategy_job(), context);
}

void train(strategy::Strategy& s, int64_t step) {
  nn::LossStats stats;
  s.train_step({test::tiny_dense_batch(step, 0, 4)}, step, stats);
}

}  // namespace

TEST_CASE("elastic state: a snapshot is of its step, and restore gives every member the source's state") {
  const job::JobConfig job = test::tiny_dense_job("one_device");
  std::unique_ptr<strategy::Strategy> ahead = one_device(job), behind = one_device(job), fresh = one_device(job);
  trainer::ElasticState ahead_state, behind_state, fresh_state;
  for (int64_t step = 0; step < 3; ++step) {
    train(*ahead, step);
    if (step < 2) train(*behind, step);
  }
  nn::LossStats epoch;
  epoch.loss_sum = 2.5, epoch.correct = 7, epoch.count = 12, epoch.tokens = 12;
  ahead_state.capture(*ahead, {3, 0, 3, true, "{\"x\": 1}", epoch});
  behind_state.capture(*behind, {2, 0, 2, true, "", {}});
  const std::string want_hash = ahead->model().params_sha256();
  REQUIRE(ahead->loss_scale()->state().good_steps == 3);
  REQUIRE(behind->loss_scale()->state().good_steps == 2);
  // A later step does not change what was captured.
  train(*ahead, 3);
  REQUIRE(ahead->model().params_sha256() != want_hash);

  const std::string source_point = ahead_state.point_json();
  CHECK(trainer::ElasticState::progress_of(source_point).first == 3);
  auto group = comm::make_local_group(3);
  std::vector<trainer::ResumePoint> points(3);
  strategy::Strategy* strategies[] = {ahead.get(), behind.get(), fresh.get()};
  trainer::ElasticState* states[] = {&ahead_state, &behind_state, &fresh_state};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] { points[r] = states[r]->restore(*strategies[r], *group[r], 0, source_point); });
  for (auto& t : threads) t.join();

  for (int r = 0; r < 3; ++r) {
    INFO("member " << r);
    CHECK(strategies[r]->model().params_sha256() == want_hash);
    CHECK(points[r].global_step == 3);
    CHECK(points[r].step_in_epoch == 3);
    CHECK(points[r].callbacks_json == "{\"x\": 1}");
    CHECK(points[r].epoch_stats.count == 12);
    CHECK(points[r].epoch_stats.loss_sum == 2.5);
    CHECK(states[r]->has_snapshot());
    REQUIRE(strategies[r]->loss_scale());
    CHECK(strategies[r]->loss_scale()->state().good_steps == 3);
  }
  // The Adam slots came too: the next step is the same on every member.
  for (strategy::Strategy* s : strategies) train(*s, 3);
  CHECK(behind->model().params_sha256() == ahead->model().params_sha256());
  CHECK(fresh->model().params_sha256() == ahead->model().params_sha256());
}
