// Implementation of report.h.
#include "trainer/reporting/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/strings.h"

#include "trainer/reporting/records.h"

namespace dtrain::trainer {

void report_run(const job::JobConfig& job, const RunOptions& options, strategy::Strategy& strategy,
                const LoopResult& loop, double wall_seconds, const std::string& details, RunSummary& summary) {
  summary.epochs = loop.epochs;
  summary.stopped_epoch = loop.stopped_epoch;
  summary.restored_epoch = loop.restored_epoch;
  summary.steps = loop.global_step;
  summary.train_loss = loop.train_loss;
  summary.train_accuracy = loop.train_accuracy;
  summary.test_loss = loop.test_loss;
  summary.test_accuracy = loop.test_accuracy;
  summary.train_samples_per_sec = loop.train_samples / std::max(loop.train_seconds, 1e-9);
  summary.params_sha256 = strategy.params_sha256();
  summary.wall_seconds = wall_seconds;
  const bool sequence = summary.label_width > 1;  // per-token figures too
  if (summary.test_accuracy >= 0.0 && sequence)
    std::printf("Test: loss %.4f, perplexity %.4f, accuracy %.4f\n", summary.test_loss, std::exp(summary.test_loss),
                summary.test_accuracy);
  else if (summary.test_accuracy >= 0.0)
    std::printf("Test: loss %.4f, accuracy %.4f\n", summary.test_loss, summary.test_accuracy);
  const double tokens_per_sec = summary.train_samples_per_sec * static_cast<double>(summary.label_width);
  const std::string tokens = sequence ? str(", ", std::llround(tokens_per_sec), " tokens/s") : std::string();
  std::printf("Done: %lld steps in %.1fs, %.0f samples/s%s%s, params_sha256 %s\n",
              static_cast<long long>(summary.steps), summary.wall_seconds, summary.train_samples_per_sec,
              tokens.c_str(), details.c_str(), summary.params_sha256.c_str());
  if (summary.utilization) {
    const Utilization& u = *summary.utilization;
    std::printf("Utilization: %s; peak memory %s (%s)\n", utilization_text(u).c_str(),
                format_bytes(static_cast<double>(u.peak_memory_bytes)).c_str(), u.peak_memory_kind.c_str());
  }
  if (summary.memory && summary.measured_memory && summary.measured_memory->peak > 0) {
    const RunSummary::MeasuredMemory& m = *summary.measured_memory;
    std::printf("Memory per task (measured): %s resident at the training's peak%s; %s above the process before the "
                "model and its data (estimate %s)\n",
                format_bytes(static_cast<double>(m.peak)).c_str(), m.peak_from_loop ? "" : " (since the process began)",
                format_bytes(static_cast<double>(m.training())).c_str(),
                format_bytes(static_cast<double>(summary.memory->total)).c_str());
  }
  if (!options.summary_path.empty()) write_summary(options.summary_path, job, summary, strategy.name());
}

}  // namespace dtrain::trainer
