// The training loop, one for every strategy (private to lib/trainer): epochs of
// steps from a StepSource, the progress line, metrics.jsonl's step records, and
// each epoch's end (evaluation, Keras' callbacks, the epoch's checkpoint, its
// report). Where the steps come from is the source's business:
//   - StrategySteps (strategy_steps.h): this task trains its batches through
//     the strategy (one_device, mirrored, multi_worker_mirrored,
//     central_storage, pipeline);
//   - a parameter_server coordinator's WorkUnitSteps (ps_training.cpp): it
//     trains nothing itself; its steps are the work units its workers complete.
// A run is the set-up (from the plan), run_epochs, then report_run (report.h).
#pragma once

#include <cstdint>

#include "data/pipeline.h"
#include "job/job_config.h"
#include "nn/losses.h"
#include "strategy/strategy.h"
#include "trainer/callback_runner.h"
#include "trainer/checkpointing.h"
#include "trainer/reporting/records.h"

namespace dtrain::trainer {

// What one advance of the training did.
struct Advance {
  int64_t global_step = 0;     // the job's steps done after it
  int64_t steps_in_epoch = 0;  // of them in this epoch (the progress line's count)
  nn::LossStats stats;         // loss and accuracy sums of the samples trained since the last advance
};

class StepSource {
 public:
  virtual ~StepSource() = default;
  // Starts epoch `epoch` (0-based); a resumed run's first epoch at its step `first_step`.
  virtual void start_epoch(int64_t epoch, int64_t first_step) = 0;
  // Advances the training: false once the epoch's steps are all done (`out`
  // untouched); else true with what was done, which may be nothing yet (a
  // coordinator whose workers have not finished a unit since the last look).
  // Checkpoints due after steps are the source's (it knows the resume position).
  virtual bool advance(Advance& out) = 0;
  // The share of the epoch's step time spent waiting for gradient all-reduces,
  // read before the epoch's state is synchronised; 0 where there is none.
  virtual double epoch_comm_wait_share() { return 0.0; }
  // The job's steps done once the epoch ended and the state was synchronised
  // (a coordinator's ps tasks may be ahead of what it last saw).
  virtual int64_t epoch_end_step(int64_t global_step) { return global_step; }
  // Whether the epoch's checkpoint is saved before evaluating (a coordinator:
  // the save fetches the ps tasks' values, which the evaluation must be of) rather
  // than after (Keras' order: save_best_only needs the evaluation).
  virtual bool checkpoint_before_evaluation() const { return false; }
  // Whether Keras' epoch callbacks run (parameter_server jobs refuse them).
  virtual bool runs_callbacks() const { return true; }
};

// What the loop works with, set up before it.
struct LoopContext {
  const job::JobConfig& job;
  strategy::Strategy& strategy;
  Checkpointer& checkpointer;
  CallbackRunner& callbacks;
  MetricsLog& metrics;
  data::Pipeline* test = nullptr;  // the test data, evaluated after each epoch; nullptr: none
  int64_t steps_per_epoch = 0;
  int64_t global_batch = 0;  // samples of one update across the job
  int64_t label_width = 1;  // labels per training sample (a sequence's T: per-token figures reported)
  // strategy.elastic: the snapshot taken after each epoch's end, and the
  // membership changes recorded once the first step at the new size is done.
  ElasticState* elastic = nullptr;
  // A language model on a GPU: FLOPs a token and the job's devices' peak
  // TFLOP/s, for each epoch's MFU (0: not reported).
  double flops_per_token = 0.0;
  double peak_tflops = 0.0;
};

// What the loop measured, for the report.
struct LoopResult {
  int64_t global_step = 0;
  int64_t epochs = 0;          // trained to (fewer than train.epochs after early stopping)
  int64_t stopped_epoch = 0;   // early stopping's epoch (1-based), else 0
  int64_t restored_epoch = 0;  // restore_best_weights' epoch, else 0
  double train_seconds = 0.0;  // the epochs' time, evaluation excluded (an elastic job's: since its start)
  double own_seconds = 0.0;    // of it, this call's (an elastic job's current group's steps)
  int64_t train_samples = 0;
  double train_loss = 0.0, train_accuracy = 0.0;  // the last epoch's
  double test_loss = -1.0, test_accuracy = -1.0;  // -1 without test data
};

// Trains epochs [start.epoch, train.epochs) from `source`, resuming at `start`.
LoopResult run_epochs(const LoopContext& c, StepSource& source, const ResumePoint& start);

}  // namespace dtrain::trainer
