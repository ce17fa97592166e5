// StrategySteps: the training loop's steps when this task trains its own
// batches through the strategy (every strategy but a parameter_server
// coordinator's): each step reads train.gradient_accumulation_steps batches
// (one step ahead on a GPU, which copies them while computing), trains them,
// checks the loss, reports the step to the runtime, saves a due checkpoint, and
// stops the job together after SIGTERM (private to lib/trainer).
#pragma once

#include <vector>

#include "trainer/trainer.h"
#include "trainer/training_loop.h"

namespace dtrain::trainer {

class StrategySteps final : public StepSource {
 public:
  StrategySteps(const job::JobConfig& job, strategy::Strategy& strategy, data::Pipeline& train,
                Checkpointer& checkpointer, const RunOptions& options, int64_t steps_per_epoch,
                int64_t global_batch, int64_t global_step);
  void start_epoch(int64_t epoch, int64_t first_step) override;
  bool advance(Advance& out) override;
  double epoch_comm_wait_share() override;

  int64_t trained_steps() const { return trained_steps_; }  // in this run (a resumed run's own)
  double data_seconds() const { return data_seconds_; }     // waiting for the data pipeline

 private:
  // The next step's micro-batches into `micro_batches_` (and the one after it into
  // `upcoming_` where the strategy reads ahead).
  void read_batches();
  // The step's samples to RunOptions::sample_log.
  void log_samples();

  const job::JobConfig& job_;
  strategy::Strategy& strategy_;
  data::Pipeline& train_;
  Checkpointer& checkpointer_;
  const RunOptions& options_;
  const int64_t steps_per_epoch_, global_batch_;
  int64_t global_step_;
  int64_t epoch_ = 0, step_in_epoch_ = 0;
  std::vector<data::Batch> micro_batches_, upcoming_;
  bool have_upcoming_ = false;  // read one step ahead for a GPU, which copies it while computing
  strategy::StepTimings timings_before_;  // at the epoch's start
  int64_t trained_steps_ = 0;
  nn::LossStats epoch_stats_;  // the epoch's so far (an elastic job's snapshot keeps them)
  double data_seconds_ = 0.0;
};

}  // namespace dtrain::trainer
