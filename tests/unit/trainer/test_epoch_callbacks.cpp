// Keras' EarlyStopping and ModelCheckpoint(save_best_only) rules, each case worked
// by hand from keras/src/callbacks/{monitor_callback,early_stopping}.py (Keras 3).
#include <catch2/catch.hpp>
#include <vector>

#include "trainer/epoch_callbacks.h"

using namespace dtrain;
using namespace dtrain::trainer;

namespace {

config::EarlyStoppingSpec early_stopping(const std::string& monitor, int64_t patience, double min_delta = 0.0) {
  config::EarlyStoppingSpec spec;
  spec.enabled = true;
  spec.monitor.monitor = monitor;
  spec.patience = patience;
  spec.min_delta = min_delta;
  return spec;
}

// The 0-based epoch after which training stops for this series of values, or -1.
int64_t stop_epoch(EarlyStopping& es, const std::vector<double>& values) {
  for (size_t e = 0; e < values.size(); ++e)
    if (es.on_epoch_end(static_cast<int64_t>(e), values[e]).stop) return static_cast<int64_t>(e);
  return -1;
}

}  // namespace

TEST_CASE("auto mode maximizes accuracies and minimizes losses", "[callbacks]") {
  config::MonitorSpec m;
  for (const char* name : {"val_loss", "loss"}) {
    m.monitor = name;
    CHECK_FALSE(m.maximize());
  }
  for (const char* name : {"val_accuracy", "accuracy"}) {
    m.monitor = name;
    CHECK(m.maximize());
  }
  m.monitor = "val_loss";
  m.mode = "max";
  CHECK(m.maximize());
}

TEST_CASE("an improvement must beat the best by more than min_delta", "[callbacks]") {
  const MonitoredBest min_mode(false, 0.1), max_mode(true, 0.1);
  CHECK(min_mode.improves_on(5.0, std::nullopt));     // the first value always improves
  CHECK(min_mode.improves_on(0.39, 0.5));             // 0.39 + 0.1 < 0.5
  CHECK_FALSE(min_mode.improves_on(0.40, 0.5));       // 0.40 + 0.1 == 0.5: not strictly less
  CHECK_FALSE(min_mode.improves_on(0.45, 0.5));
  CHECK(max_mode.improves_on(0.61, 0.5));             // 0.61 - 0.1 > 0.5
  CHECK_FALSE(max_mode.improves_on(0.55, 0.5));
  const MonitoredBest strict(false, 0.0);
  CHECK_FALSE(strict.improves_on(0.5, 0.5));          // equal is no improvement
}

TEST_CASE("early stopping waits `patience` epochs after the best", "[callbacks]") {
  // val_loss 1.0, 0.8, 0.85, 0.9, 0.7, 0.75, 0.76, 0.77 with patience 2:
  // best 1.0 (e0), 0.8 (e1); e2 wait 1; e3 wait 2 >= 2 -> stop after epoch 3.
  EarlyStopping es(early_stopping("val_loss", 2));
  CHECK(stop_epoch(es, {1.0, 0.8, 0.85, 0.9, 0.7, 0.75, 0.76, 0.77}) == 3);
  CHECK(es.best_epoch() == 1);
  CHECK(*es.best().best == 0.8);
  CHECK(es.stopped_epoch() == 3);

  // patience 3: e4's 0.7 improves (wait 0), e5..e7 wait 1..3 -> stop after epoch 7.
  EarlyStopping patient(early_stopping("val_loss", 3));
  CHECK(stop_epoch(patient, {1.0, 0.8, 0.85, 0.9, 0.7, 0.75, 0.76, 0.77}) == 7);
  CHECK(patient.best_epoch() == 4);
}

TEST_CASE("patience 0 stops at the first epoch without improvement, never after the first epoch", "[callbacks]") {
  EarlyStopping es(early_stopping("loss", 0));
  const auto first = es.on_epoch_end(0, 1.0);
  CHECK(first.improved);
  CHECK_FALSE(first.stop);
  CHECK(es.on_epoch_end(1, 0.9).improved);
  const auto third = es.on_epoch_end(2, 0.95);
  CHECK_FALSE(third.improved);
  CHECK(third.stop);
}

TEST_CASE("min_delta turns small improvements into waiting", "[callbacks]") {
  // accuracy (max) 0.50, 0.52, 0.53, 0.56 with min_delta 0.05, patience 2:
  // e0 best 0.50; e1 0.52 - 0.05 < 0.50: wait 1; e2 0.53: wait 2 -> stop after epoch 2.
  EarlyStopping es(early_stopping("accuracy", 2, 0.05));
  CHECK(stop_epoch(es, {0.50, 0.52, 0.53, 0.56}) == 2);
  CHECK(*es.best().best == 0.50);
  // Without min_delta every one of them improves.
  EarlyStopping plain(early_stopping("accuracy", 2));
  CHECK(stop_epoch(plain, {0.50, 0.52, 0.53, 0.56}) == -1);
  CHECK(plain.best_epoch() == 3);
}

TEST_CASE("a baseline must be beaten before the wait resets", "[callbacks]") {
  // val_loss 0.9, 0.8, 0.7 with baseline 0.5, patience 2: each is a new best but none
  // beats the baseline, so the wait grows 1, 2, 3; an improving epoch returns before
  // the patience check (as in Keras), so training goes on until e3's 0.75, which is
  // no improvement: wait 4 >= 2 -> stop after epoch 3.
  auto spec = early_stopping("val_loss", 2);
  spec.baseline = 0.5;
  EarlyStopping es(spec);
  CHECK_FALSE(es.on_epoch_end(0, 0.9).stop);
  CHECK(es.wait() == 1);
  CHECK_FALSE(es.on_epoch_end(1, 0.8).stop);
  CHECK(es.wait() == 2);
  CHECK_FALSE(es.on_epoch_end(2, 0.7).stop);
  CHECK(es.wait() == 3);
  CHECK(es.on_epoch_end(3, 0.75).stop);
  CHECK(es.best_epoch() == 2);
  // Beating the baseline resets the wait.
  EarlyStopping beaten(spec);
  beaten.on_epoch_end(0, 0.9);
  beaten.on_epoch_end(1, 0.4);
  CHECK(beaten.wait() == 0);
}

TEST_CASE("start_from_epoch ignores the first epochs", "[callbacks]") {
  auto spec = early_stopping("val_loss", 0);
  spec.start_from_epoch = 2;
  EarlyStopping es(spec);
  CHECK_FALSE(es.on_epoch_end(0, 0.5).improved);  // not looked at
  CHECK_FALSE(es.on_epoch_end(1, 0.9).stop);
  CHECK(es.on_epoch_end(2, 0.9).improved);        // the first watched value
  CHECK(es.on_epoch_end(3, 0.95).stop);
}

TEST_CASE("the early stopping state survives a checkpoint", "[callbacks]") {
  EarlyStopping before(early_stopping("val_loss", 2));
  before.on_epoch_end(0, 1.0);
  before.on_epoch_end(1, 0.8);
  before.on_epoch_end(2, 0.85);  // wait 1
  EarlyStopping after(early_stopping("val_loss", 2));
  after.restore_state(before.state_json());
  CHECK(after.wait() == 1);
  CHECK(after.best_epoch() == 1);
  CHECK(after.on_epoch_end(3, 0.9).stop);  // as the uninterrupted run: stop after epoch 3
  // A state saved for another monitor is not taken.
  EarlyStopping other(early_stopping("val_accuracy", 2));
  other.restore_state(before.state_json());
  CHECK_FALSE(other.best().best.has_value());
}

TEST_CASE("save_best_only saves strict improvements only", "[callbacks]") {
  config::CheckpointSpec spec;
  spec.save_best_only = true;
  spec.monitor.monitor = "val_accuracy";
  SaveBestOnly save(spec);
  std::vector<bool> saved;
  for (double v : {0.80, 0.82, 0.82, 0.81, 0.85}) saved.push_back(save.on_epoch_end(v));
  CHECK(saved == std::vector<bool>{true, true, false, false, true});
  CHECK(*save.best().best == 0.85);
  SaveBestOnly resumed(spec);
  resumed.restore_state(save.state_json());
  CHECK_FALSE(resumed.on_epoch_end(0.84));
}

TEST_CASE("monitored values come from the epoch's report", "[callbacks]") {
  EpochReport r;
  r.loss = 0.5;
  r.accuracy = 0.8;
  CHECK(*monitored_value(r, "loss") == 0.5);
  CHECK(*monitored_value(r, "accuracy") == 0.8);
  CHECK_FALSE(monitored_value(r, "val_loss").has_value());
  r.has_validation = true;
  r.val_loss = 0.6;
  r.val_accuracy = 0.7;
  CHECK(*monitored_value(r, "val_loss") == 0.6);
  CHECK(*monitored_value(r, "val_accuracy") == 0.7);
}
