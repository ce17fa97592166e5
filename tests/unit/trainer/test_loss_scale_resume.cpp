// The dynamic loss scale is state a checkpoint keeps: a strategy with loss
// scaling (float32 compute, StrategyContext::loss_scaling) skips a step and
// counts finite ones, the Checkpointer saves, and a fresh strategy resumed from
// that checkpoint has the same scale and counters (and parameters); a strategy
// without loss scaling resumes from it as before.
#include <catch2/catch.hpp>
#include <limits>

#include "support/temp_dir.h"
#include "support/tiny_dense_job.h"
#include "trainer/checkpointing.h"

using namespace dtrain;

TEST_CASE("checkpoints keep the loss scale and its counters, a resumed run continues with them") {
  test::TempDir dir;
  job::JobConfig job = test::tiny_dense_job("one_device");
  job.checkpoint.dir = dir.path();
  strategy::StrategyContext context{nullptr, 1};
  context.loss_scaling = true;

  std::string saved_hash;
  {
    auto s = strategy::make_strategy(job.strategy_job(), context);
    for (int64_t step = 0; step < 4; ++step) {
      data::Batch b = test::tiny_dense_batch(step, 0, 4);
      if (step == 1) b.images.data()[0] = std::numeric_limits<float>::infinity();  // skipped
      nn::LossStats stats;
      s->train_step({b}, step, stats);
    }
    REQUIRE(s->loss_scale()->scale() == 16384.0);
    REQUIRE(s->loss_scale()->state().good_steps == 2);
    trainer::Checkpointer checkpointer(job, *s, nullptr);
    REQUIRE(!checkpointer.save_now(4, 0, 4, 4).empty());
    saved_hash = s->model().params_sha256();
  }

  job.checkpoint.resume = true;
  auto resumed = strategy::make_strategy(job.strategy_job(), context);
  CHECK(resumed->loss_scale()->scale() == 32768.0);  // a fresh strategy starts at 2^15
  trainer::Checkpointer checkpointer(job, *resumed, nullptr);
  const trainer::ResumePoint point = checkpointer.resume(4, 100);
  CHECK(point.resumed);
  CHECK(point.global_step == 4);
  CHECK(resumed->model().params_sha256() == saved_hash);
  const optim::LossScaleState state = resumed->loss_scale()->state();
  CHECK(state.scale == 16384.0);
  CHECK(state.good_steps == 2);
  CHECK(state.skipped_steps == 1);

  // Without loss scaling the record is ignored.
  auto plain = strategy::make_strategy(job.strategy_job(), {nullptr, 1});
  trainer::Checkpointer plain_checkpointer(job, *plain, nullptr);
  CHECK(plain_checkpointer.resume(4, 100).resumed);
  CHECK(plain->loss_scale() == nullptr);
}
