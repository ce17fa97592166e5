// DynamicLossScale against Keras 3's LossScaleOptimizer rule: growth after a run
// of finite steps, halving and a skip on a non-finite step (which restarts the
// run), repeated halving, the step number the optimizer sees, and the state a
// checkpoint keeps.
#include <catch2/catch.hpp>

#include "core/error.h"
#include "optim/loss_scale.h"

using namespace dtrain;
using optim::DynamicLossScale;

TEST_CASE("loss scale: starts at 2^15 and doubles after 2000 finite steps in a row") {
  DynamicLossScale s;
  CHECK(s.scale() == 32768.0);
  for (int i = 0; i < 1999; ++i) REQUIRE(s.update(true));
  CHECK(s.scale() == 32768.0);  // 1999 finite steps: not yet
  CHECK(s.state().good_steps == 1999);
  CHECK(s.update(true));        // the 2000th
  CHECK(s.scale() == 65536.0);
  CHECK(s.state().good_steps == 0);
  for (int i = 0; i < 2000; ++i) s.update(true);
  CHECK(s.scale() == 131072.0);
}

TEST_CASE("loss scale: a non-finite step is skipped, halves the scale and restarts the run") {
  DynamicLossScale s(1024.0, 3);
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK_FALSE(s.update(false));  // skip
  CHECK(s.scale() == 512.0);
  CHECK(s.state().good_steps == 0);
  CHECK(s.state().skipped_steps == 1);
  // The run starts again: two finite steps do not grow it, the third does.
  CHECK(s.update(true));
  CHECK(s.update(true));
  CHECK(s.scale() == 512.0);
  CHECK(s.update(true));
  CHECK(s.scale() == 1024.0);
}

TEST_CASE("loss scale: repeated non-finite steps halve it each time") {
  DynamicLossScale s;
  for (int i = 1; i <= 5; ++i) {
    CHECK_FALSE(s.update(false));
    CHECK(s.scale() == 32768.0 / (1 << i));
  }
  CHECK(s.state().skipped_steps == 5);
  // The optimizer sees only the applied steps: training step 7 is its 3rd (0-based 2).
  CHECK(s.applied_before(7) == 2);
}

TEST_CASE("loss scale: the state round-trips, and a bad saved scale is a ConfigError") {
  DynamicLossScale a(256.0, 4);
  a.update(true);
  a.update(false);
  a.update(true);
  a.update(true);
  DynamicLossScale b(256.0, 4);
  b.restore(a.state());
  CHECK(b.scale() == 128.0);
  CHECK(b.state().good_steps == 2);
  CHECK(b.state().skipped_steps == 1);
  // Both continue identically: two more finite steps grow both.
  for (DynamicLossScale* s : {&a, &b}) {
    s->update(true);
    s->update(true);
  }
  CHECK(a.scale() == 256.0);
  CHECK(b.scale() == 256.0);
  CHECK_THROWS_AS(b.restore({0.0, 0, 0}), ConfigError);
  CHECK_THROWS_AS(b.restore({-1.0, 0, 0}), ConfigError);
  CHECK_THROWS_AS(DynamicLossScale(1.0, 0), ConfigError);
}
