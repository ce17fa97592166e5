// Keras' epoch-end callbacks over an epoch's figures (private to lib/trainer):
// EarlyStopping (stop when the monitored figure has not improved for `patience`
// epochs) and ModelCheckpoint's save_best_only (an epoch's checkpoint only when
// the figure improved on the best saved).
//
// The rules are Keras 3's (keras/src/callbacks/monitor_callback.py and
// early_stopping.py): a value improves on the best when it is lower by more than
// min_delta (min mode) or higher by more than min_delta (max mode); the first
// value always improves; `wait` counts the epochs since the last improvement that
// also beat `baseline`; training stops when wait >= patience, never after the
// first epoch. Their state (best, wait, best epoch) is kept in checkpoints, so a
// resumed job stops after the same epoch as one that ran through.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/job_file.h"
#include "trainer/reporting/progress.h"

namespace dtrain::trainer {

// The figure `monitor` names ("loss", "accuracy", "val_loss", "val_accuracy") in
// an epoch's report; nullopt for a val_* figure of an epoch without evaluation.
std::optional<double> monitored_value(const EpochReport& report, const std::string& monitor);

// A best value so far and Keras' rule for beating it.
class MonitoredBest {
 public:
  MonitoredBest(bool maximize, double min_delta) : maximize_(maximize), min_delta_(min_delta) {}
  // Whether `current` improves on `reference` (Keras' _is_improvement); any value
  // improves on no reference.
  bool improves_on(double current, const std::optional<double>& reference) const;
  bool improves(double current) const { return improves_on(current, best); }
  std::optional<double> best;

 private:
  bool maximize_;
  double min_delta_;
};

class EarlyStopping {
 public:
  explicit EarlyStopping(const config::EarlyStoppingSpec& spec);

  struct Verdict {
    bool improved = false;  // a new best (its parameters are the ones to restore)
    bool stop = false;      // training stops after this epoch
  };
  // After epoch `epoch` (0-based, as Keras counts) with the monitored `current`.
  Verdict on_epoch_end(int64_t epoch, double current);

  bool enabled() const { return spec_.enabled; }
  const config::EarlyStoppingSpec& spec() const { return spec_; }
  const MonitoredBest& best() const { return best_; }
  int64_t wait() const { return wait_; }
  int64_t best_epoch() const { return best_epoch_; }        // 0-based
  int64_t stopped_epoch() const { return stopped_epoch_; }  // 0-based; 0 = not stopped (Keras' convention)

  // The state as a JSON object's text, and back (from a checkpoint).
  std::string state_json() const;
  void restore_state(const std::string& json);

 private:
  config::EarlyStoppingSpec spec_;
  MonitoredBest best_;
  int64_t wait_ = 0;
  int64_t best_epoch_ = 0;
  int64_t stopped_epoch_ = 0;
};

// ModelCheckpoint(save_best_only=True)'s decision.
class SaveBestOnly {
 public:
  explicit SaveBestOnly(const config::CheckpointSpec& spec);
  bool enabled() const { return enabled_; }
  const std::string& monitor() const { return monitor_; }
  const MonitoredBest& best() const { return best_; }
  // Whether the epoch with `current` is saved (it improved; it becomes the best).
  bool on_epoch_end(double current);

  std::string state_json() const;
  void restore_state(const std::string& json);

 private:
  bool enabled_;
  std::string monitor_;
  MonitoredBest best_;
};

}  // namespace dtrain::trainer
