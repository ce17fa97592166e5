// Evaluation and the epoch's figures: loss and accuracy of summed stats (per
// label position: per token for a sequence's labels), the test set through the
// strategy, an epoch's report.
#include "trainer/setup/job_setup.h"

namespace dtrain::trainer {

double mean_loss(const nn::LossStats& s) { return s.tokens ? s.loss_sum / s.tokens : 0.0; }
double accuracy(const nn::LossStats& s) { return s.tokens ? static_cast<double>(s.correct) / s.tokens : 0.0; }

nn::LossStats evaluate(strategy::Strategy& strategy, data::Pipeline& pipeline) {
  nn::LossStats stats;
  pipeline.start_epoch(0);
  data::Batch batch;
  while (pipeline.next(batch)) strategy.eval_step(batch, stats);
  return stats;
}

EpochReport epoch_report(int64_t epoch, int64_t epochs, int64_t steps, double seconds, const nn::LossStats& stats,
                         int64_t label_width) {
  EpochReport report;
  report.epoch = epoch;
  report.epochs = epochs;
  report.steps = steps;
  report.seconds = seconds;
  report.samples_per_sec = stats.count / std::max(seconds, 1e-9);
  report.label_width = label_width;
  report.tokens_per_sec = stats.tokens / std::max(seconds, 1e-9);
  report.step_ms = steps > 0 ? seconds * 1000.0 / static_cast<double>(steps) : 0.0;
  report.loss = mean_loss(stats);
  report.accuracy = accuracy(stats);
  return report;
}


}  // namespace dtrain::trainer
