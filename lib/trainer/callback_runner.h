// Runs the job's Keras callbacks (train.early_stopping, checkpoint.save_best_only)
// at each epoch's end of the training loop (private to lib/trainer): the chief's
// verdict is broadcast so that every task saves and stops after the same epoch,
// and restore_best_weights keeps a copy of the best epoch's parameters.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "comm/communicator.h"
#include "job/job_config.h"
#include "strategy/strategy.h"
#include "trainer/epoch_callbacks.h"

namespace dtrain::trainer {

class CallbackRunner {
 public:
  // workers: the training tasks' group (multi-worker) or nullptr.
  CallbackRunner(const job::JobConfig& job, strategy::Strategy& strategy, comm::Communicator* workers);

  // The callbacks' state from a checkpoint being resumed ("" = none).
  void resume(const std::string& state_json);
  // Their state for the next checkpoint, a JSON object's text.
  std::string state_json() const;

  struct Decision {
    bool save = true;   // with save_best_only: the monitored figure improved
    bool stop = false;  // early stopping: train no further epochs
  };
  // After epoch `epoch` (0-based) was trained and evaluated; the same on every task.
  Decision on_epoch_end(int64_t epoch, const EpochReport& report);

  // At the end of training with restore_best_weights: puts the best epoch's
  // parameters back into the strategy and returns that epoch's report; otherwise nullopt.
  std::optional<EpochReport> restore_best();

  const EarlyStopping& early_stopping() const { return early_stopping_; }

 private:
  void snapshot(const EpochReport& report);

  strategy::Strategy& strategy_;
  comm::Communicator* workers_;
  EarlyStopping early_stopping_;
  SaveBestOnly save_best_;
  std::map<std::string, Tensor> best_params_;  // copies on the device (restore_best_weights)
  std::optional<EpochReport> best_report_;
};

}  // namespace dtrain::trainer
