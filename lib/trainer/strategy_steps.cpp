// Implementation of strategy_steps.h.
#include "trainer/strategy_steps.h"

#include <cmath>
#include <cstdio>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "trainer/elastic_state.h"

namespace dtrain::trainer {

StrategySteps::StrategySteps(const job::JobConfig& job, strategy::Strategy& strategy, data::Pipeline& train,
                             Checkpointer& checkpointer, const RunOptions& options, int64_t steps_per_epoch,
                             int64_t global_batch, int64_t global_step)
    : job_(job),
      strategy_(strategy),
      train_(train),
      checkpointer_(checkpointer),
      options_(options),
      steps_per_epoch_(steps_per_epoch),
      global_batch_(global_batch),
      global_step_(global_step),
      micro_batches_(static_cast<size_t>(job.train.gradient_accumulation_steps)),
      upcoming_(static_cast<size_t>(job.train.gradient_accumulation_steps)) {}

void StrategySteps::start_epoch(int64_t epoch, int64_t first_step) {
  epoch_ = epoch;
  timings_before_ = strategy_.timings();
  train_.start_epoch(epoch);
  have_upcoming_ = false;
  step_in_epoch_ = 0;
  epoch_stats_ = {};
  // An elastic job's re-formed group continues the epoch's figures.
  if (options_.elastic && first_step > 0) epoch_stats_ = options_.elastic->point().epoch_stats;
  if (first_step > 0) {
    // Resuming mid-epoch: the epoch's order is a function of (seed, epoch), so
    // skipping the batches already trained on continues exactly where it stopped.
    data::Batch skipped;
    for (int64_t i = 0; i < first_step * job_.train.gradient_accumulation_steps; ++i)
      DT_CHECK(train_.next(skipped), "the pipeline ran out of batches while resuming");
    step_in_epoch_ = first_step;
  }
}

void StrategySteps::read_batches() {
  const trace::Span data_span("data", "data");
  if (options_.before_batch) options_.before_batch(global_step_ + 1);
  if (have_upcoming_) {
    micro_batches_.swap(upcoming_);
    have_upcoming_ = false;
  } else {
    for (auto& b : micro_batches_) DT_CHECK(train_.next(b), "the pipeline ran out of batches early");
  }
  if (strategy_.wants_upcoming() && step_in_epoch_ + 1 < steps_per_epoch_) {
    for (auto& b : upcoming_) DT_CHECK(train_.next(b), "the pipeline ran out of batches early");
    have_upcoming_ = true;
  }
}

bool StrategySteps::advance(Advance& out) {
  if (step_in_epoch_ >= steps_per_epoch_) return false;
  const trace::Span step_span("step", "step");
  Stopwatch data_time;
  read_batches();
  data_seconds_ += data_time.seconds();
  ++trained_steps_;
  nn::LossStats stats;
  if (options_.stop_signal && options_.stop_signal() != 0) strategy_.request_stop();
  strategy_.train_step(micro_batches_, global_step_, stats, have_upcoming_ ? &upcoming_ : nullptr);
  if (!std::isfinite(stats.loss_sum))
    throw RuntimeError(str("the loss became ", stats.loss_sum, " at step ", global_step_ + 1, " (epoch ", epoch_ + 1,
                           "); lower optimizer.learning_rate or check the data"));
  ++step_in_epoch_;
  ++global_step_;
  epoch_stats_.add(stats);
  if (!options_.sample_log.empty()) log_samples();
  if (options_.elastic)  // before anything that may throw for another task's loss
    options_.elastic->capture(strategy_, {global_step_, epoch_, step_in_epoch_, true,
                                          options_.elastic->point().callbacks_json, epoch_stats_});
  if (options_.on_step) options_.on_step(global_step_);
  checkpointer_.after_step(global_step_, epoch_, step_in_epoch_, global_batch_);
  // (not after the job's last step: a task that comes now is told the job
  // ended, runtime/elastic.h; some members seeing the change and some not would
  // leave the ones that did waiting for the others)
  const bool job_last_step = epoch_ + 1 == job_.train.epochs && step_in_epoch_ == steps_per_epoch_;
  if (options_.elastic && options_.elastic->membership_changed && !job_last_step &&
      options_.elastic->membership_changed())
    throw MembershipChanged(str("the job's training tasks changed after step ", global_step_));
  if (strategy_.stop_agreed()) {
    const std::string saved = checkpointer_.save_now(global_step_, epoch_, step_in_epoch_, global_batch_);
    const int signal = options_.stop_signal ? options_.stop_signal() : 0;
    throw Preempted(str(stop_reason(signal), " after step ", global_step_,
                        saved.empty() ? std::string("; no checkpoint saved (set checkpoint.dir or output.dir)")
                                      : str("; checkpoint ", saved, " saved: resume with --resume")),
                    stop_exit_code(signal));
  }
  out.global_step = global_step_;
  out.steps_in_epoch = step_in_epoch_;
  out.stats = stats;
  return true;
}

void StrategySteps::log_samples() {
  std::string line = str(epoch_, " ", global_step_, " ", trace::now_us());
  for (const data::Batch& b : micro_batches_)
    for (int64_t s : b.samples) line += str(" ", s);
  line += "\n";
  std::FILE* f = std::fopen(options_.sample_log.c_str(), "a");
  if (!f) throw IoError(str("DTRAIN_SAMPLE_LOG: cannot append to ", options_.sample_log));
  std::fwrite(line.data(), 1, line.size(), f);
  std::fclose(f);
}

double StrategySteps::epoch_comm_wait_share() {
  const strategy::StepTimings after = strategy_.timings();
  const double step_seconds = after.step_seconds - timings_before_.step_seconds;
  return step_seconds > 0 ? (after.comm_wait_seconds - timings_before_.comm_wait_seconds) / step_seconds : 0.0;
}

}  // namespace dtrain::trainer
