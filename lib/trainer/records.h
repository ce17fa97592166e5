// JSON records the trainer writes: output.dir/metrics.jsonl (one object per line,
// appended as training goes) and the --summary file.
#pragma once

#include <cstdio>
#include <string>

#include "job/job_config.h"
#include "trainer/progress.h"
#include "trainer/trainer.h"

namespace dtrain::trainer {

class MetricsLog {
 public:
  // Opens dir/metrics.jsonl for writing (truncating, or appending when a run
  // resumes); dir "" = no log. Creates dir.
  explicit MetricsLog(const std::string& dir, bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void step(int64_t epoch, int64_t step, double loss, double accuracy, double learning_rate,
            double samples_per_sec);
  void epoch(const EpochReport& report, int64_t global_step);
  // An evaluator's record of one checkpoint.
  void evaluation(int64_t step, double loss, double accuracy);

 private:
  void write_line(const std::string& line);
  std::FILE* file_ = nullptr;
  std::string path_;
};

// Writes the run summary as a JSON object (atomically: a temporary file, then rename).
void write_summary(const std::string& path, const job::JobConfig& job, const RunSummary& s,
                   const std::string& strategy);

}  // namespace dtrain::trainer
