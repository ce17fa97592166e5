// One options struct and one function per subcommand (CLI11-free, so that only
// main.cpp pays CLI11's compile time). Each function returns the exit code.
#pragma once

#include <string>
#include <vector>

namespace dtrain::app {

// Options every job-reading command shares.
struct JobOptions {
  std::string config;                  // --config FILE
  std::vector<std::string> overrides;  // --set key.path=value (repeatable)
  int threads = 0;                     // --threads N (0 = from the config / environment)
};

struct RunOptions {
  JobOptions job;
  std::string summary;  // --summary FILE
};

struct BenchTrainOptions {
  JobOptions job;
  long long steps = 100;
  long long warmup = 10;
  long long batch = 0;  // 0 = the config's batch_size_per_replica
  bool json = false;
};

int run_command(const RunOptions& options);
int validate_command(const JobOptions& options);
int bench_train_command(const BenchTrainOptions& options);
int version_command();

}  // namespace dtrain::app
