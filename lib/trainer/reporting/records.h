// Records the trainer writes: output.dir/metrics.jsonl (one object per line,
// appended as training goes), the same figures as TensorBoard scalars
// (tensorboard.h, output.tensorboard), and the --summary file. A job whose
// samples have a sequence of labels (RunSummary::label_width > 1) adds per-token
// figures: perplexity (exp of the loss per token) and tokens/s.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "job/job_config.h"
#include "trainer/reporting/progress.h"
#include "trainer/reporting/tensorboard.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {

class MetricsLog {
 public:
  // Opens dir/metrics.jsonl for writing (truncating, or appending when a run
  // resumes); dir "" = no log. Creates dir. With `tensorboard_dir`, every record
  // also goes to TensorBoard event files there (Keras' tags: step records as
  // batch_loss/batch_accuracy, epochs as epoch_*, evaluations as
  // evaluation_*_vs_iterations). `label_width` > 1 (a sequence's labels per
  // sample) adds perplexity and tokens/s to the records and scalars.
  explicit MetricsLog(const std::string& dir, bool append = false, const std::string& tensorboard_dir = "",
                      int64_t label_width = 1);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void step(int64_t epoch, int64_t step, double loss, double accuracy, double learning_rate,
            double samples_per_sec);
  void epoch(const EpochReport& report, int64_t global_step);
  // strategy.elastic: a change of the training tasks ({"kind": "membership"}).
  void membership(const MembershipChange& change);
  // An evaluator's record of one checkpoint.
  void evaluation(int64_t step, double loss, double accuracy);

 private:
  void write_line(const std::string& line);
  std::FILE* file_ = nullptr;
  std::string path_;
  int64_t label_width_ = 1;
  std::unique_ptr<TensorBoardLog> tensorboard_;
};

// Where the chief's TensorBoard files go: <output.dir>/tensorboard, or "" when
// output.dir is unset or output.tensorboard is false.
std::string tensorboard_dir(const job::JobConfig& job);

// Writes the run summary as a JSON object (atomically: a temporary file, then rename).
void write_summary(const std::string& path, const job::JobConfig& job, const RunSummary& s,
                   const std::string& strategy);

// What a ps task of a parameter_server job did (it trains nothing): its summary.
struct PsTaskSummary {
  int64_t world_size = 0;       // the training workers it served
  int64_t variable_floats = 0;  // the variables' elements it holds
  int64_t updates_applied = 0;
  double wall_seconds = 0.0;
};
void write_ps_summary(const std::string& path, const job::JobConfig& job, const PsTaskSummary& s);

}  // namespace dtrain::trainer
