// Implementation of training_loop.h: the epochs, whatever the steps' source.
#include "trainer/training_loop.h"

#include <algorithm>

#include "core/log.h"
#include "core/strings.h"
#include "core/timer.h"
#include "core/trace.h"
#include "trainer/elastic_state.h"
#include "trainer/setup/job_setup.h"
#include "trainer/reporting/progress.h"

namespace dtrain::trainer {
namespace {

// The learning rate of the update after `steps_done` steps: under loss scaling
// the optimizer's step count leaves out skipped steps.
double learning_rate(strategy::Strategy& strategy, int64_t steps_done) {
  const int64_t step = std::max<int64_t>(0, steps_done - 1);
  const optim::DynamicLossScale* scale = strategy.loss_scale();
  return strategy.optimizer().learning_rate(scale ? std::max<int64_t>(0, scale->applied_before(step)) : step);
}

// After a step: the first one done since the group re-formed completes the
// newest membership change (the time it took) and every task logs it; the
// chief's metrics.jsonl records what it has not yet.
void record_membership(const LoopContext& c) {
  ElasticState& elastic = *c.elastic;
  if (elastic.reforming && !elastic.changes.empty()) {
    MembershipChange& change = elastic.changes.back();
    change.reform_seconds = elastic.reforming->seconds();
    change.resumed_unix_time = static_cast<double>(trace::now_us()) / 1e6;
    elastic.reforming.reset();
    log::info("elastic: training again at ", change.training_tasks, " task(s) (a step: ", elastic.split.describe(),
              " by task, the global batch of ", elastic.split.global_batch, " kept), ",
              format_seconds(change.reform_seconds), " after the change was seen");
  }
  for (; elastic.recorded < elastic.changes.size() && !elastic.reforming; ++elastic.recorded)
    c.metrics.membership(elastic.changes[elastic.recorded]);
}

}  // namespace

LoopResult run_epochs(const LoopContext& c, StepSource& source, const ResumePoint& start) {
  const job::JobConfig& job = c.job;
  LoopResult r;
  r.global_step = start.global_step;
  r.epochs = job.train.epochs;
  if (c.elastic) {  // an elastic job's totals go on from its earlier generations'
    r.train_seconds = c.elastic->train_seconds;
    r.train_samples = c.elastic->train_samples;
  }
  Progress progress;
  const int64_t every = job.train.log_every_steps;
  for (int64_t epoch = start.epoch; epoch < job.train.epochs; ++epoch) {
    Stopwatch epoch_time, window_time, own_time;
    if (c.elastic) {  // an epoch a re-formed group continues keeps its clock
      if (c.elastic->clock_epoch != epoch) c.elastic->clock_epoch = epoch, c.elastic->epoch_clock.reset();
      epoch_time = c.elastic->epoch_clock;
    }
    nn::LossStats epoch_stats, window_stats;
    // An elastic job's re-formed group continues the epoch's figures.
    if (c.elastic && epoch == start.epoch && start.step_in_epoch > 0) epoch_stats = start.epoch_stats;
    source.start_epoch(epoch, epoch == start.epoch ? start.step_in_epoch : 0);
    Advance a;
    while (source.advance(a)) {
      if (c.elastic) record_membership(c);
      epoch_stats.add(a.stats);
      window_stats.add(a.stats);
      const int64_t before = r.global_step;
      r.global_step = a.global_step;
      progress.step({epoch + 1, job.train.epochs, a.steps_in_epoch, c.steps_per_epoch, mean_loss(epoch_stats),
                     accuracy(epoch_stats), epoch_stats.count / std::max(epoch_time.seconds(), 1e-9),
                     epoch_time.seconds()});
      // A record each time the step count passes a multiple of log_every_steps.
      if (every > 0 && r.global_step / every > before / every && window_stats.count > 0) {
        c.metrics.step(epoch + 1, r.global_step, mean_loss(window_stats), accuracy(window_stats),
                       learning_rate(c.strategy, r.global_step),
                       window_stats.count / std::max(window_time.seconds(), 1e-9));
        window_stats = {};
        window_time.reset();
      }
    }
    const double seconds = epoch_time.seconds();
    r.train_seconds += seconds;
    r.own_seconds += own_time.seconds();
    r.train_samples += epoch_stats.count;

    EpochReport report =
        epoch_report(epoch + 1, job.train.epochs, c.steps_per_epoch, seconds, epoch_stats, c.label_width);
    report.comm_wait_share = source.epoch_comm_wait_share();
    if (c.peak_tflops > 0) report.mfu = report.tokens_per_sec * c.flops_per_token / 1e12 / c.peak_tflops;
    c.strategy.sync_state();
    r.global_step = source.epoch_end_step(r.global_step);
    report.learning_rate = learning_rate(c.strategy, r.global_step);
    if (const optim::DynamicLossScale* scale = c.strategy.loss_scale()) report.loss_scale = scale->scale();
    const bool last_by_count = epoch + 1 == job.train.epochs;
    if (source.checkpoint_before_evaluation())
      c.checkpointer.after_epoch(r.global_step, epoch + 1, c.global_batch, last_by_count);
    if (c.test) {
      const nn::LossStats val = evaluate(c.strategy, *c.test);
      report.has_validation = true;
      report.val_loss = r.test_loss = mean_loss(val);
      report.val_accuracy = r.test_accuracy = accuracy(val);
    }
    CallbackRunner::Decision decision;
    if (source.runs_callbacks()) {
      decision = c.callbacks.on_epoch_end(epoch, report);
      c.checkpointer.set_callbacks_state(c.callbacks.state_json());
    }
    const bool last = last_by_count || decision.stop;
    // The epoch's checkpoint holds the epoch's parameters (the test figures are of
    // them), also when restore_best_weights then puts an earlier epoch's back, as
    // Keras' ModelCheckpoint saves before EarlyStopping restores.
    if (!source.checkpoint_before_evaluation())
      c.checkpointer.after_epoch(r.global_step, epoch + 1, c.global_batch, last, decision.save);
    progress.epoch_done(report);
    c.metrics.epoch(report, r.global_step);
    if (c.elastic) {  // the epoch's end is done: a loss from here on redoes none of it
      c.elastic->capture(c.strategy, {r.global_step, epoch + 1, 0, true, c.callbacks.state_json()});
      c.elastic->train_seconds = r.train_seconds;
      c.elastic->train_samples = r.train_samples;
    }
    r.train_loss = report.loss;
    r.train_accuracy = report.accuracy;
    if (decision.stop) r.stopped_epoch = epoch + 1;
    if (last) {
      if (source.runs_callbacks())
        if (const std::optional<EpochReport> best = c.callbacks.restore_best()) {
          r.restored_epoch = best->epoch;
          if (best->has_validation) {
            r.test_loss = best->val_loss;
            r.test_accuracy = best->val_accuracy;
          }
        }
      break;
    }
  }
  if (r.stopped_epoch > 0) r.epochs = r.stopped_epoch;
  return r;
}

}  // namespace dtrain::trainer
