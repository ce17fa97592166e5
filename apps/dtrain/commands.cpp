// The subcommands behind main.cpp: load the job config (with --set and --threads
// applied) and hand it to the trainer.
#include "commands.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "config/job_config.h"
#include "core/strings.h"
#include "trainer/trainer.h"

namespace dtrain::app {
namespace {

config::JobConfig load_job(const JobOptions& options, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = options.overrides;
  if (options.threads > 0) overrides.push_back(str("runtime.threads=", options.threads));
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  return config::load_job_config(options.config, overrides);
}

}  // namespace

int run_command(const RunOptions& options) {
  const config::JobConfig job = load_job(options.job);
  trainer::RunOptions run;
  run.summary_path = options.summary;
  trainer::run_training(job, run);
  return 0;
}

int validate_command(const JobOptions& options) {
  const config::JobConfig job = load_job(options);
  trainer::validate_job(job);
  std::printf("%s is valid\n", options.config.c_str());
  return 0;
}

int bench_train_command(const BenchTrainOptions& options) {
  std::vector<std::string> extra;
  if (options.batch > 0) extra.push_back(str("train.batch_size_per_replica=", options.batch));
  const config::JobConfig job = load_job(options.job, extra);
  trainer::BenchOptions bench;
  bench.steps = options.steps;
  bench.warmup_steps = options.warmup;
  const trainer::BenchResult r = trainer::bench_train(job, bench);
  if (options.json) {
    const nlohmann::json j = {{"config", options.job.config}, {"batch_size", r.batch_size},
                              {"threads", r.threads},         {"steps", r.steps},
                              {"seconds", r.seconds},         {"samples_per_sec", r.samples_per_sec}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s: batch %lld, %d threads, %lld steps in %.3fs: %.1f samples/s\n",
                options.job.config.c_str(), static_cast<long long>(r.batch_size), r.threads,
                static_cast<long long>(r.steps), r.seconds, r.samples_per_sec);
  }
  return 0;
}

int version_command() {
  std::printf("dtrain %s\n", DTRAIN_VERSION);
  return 0;
}

}  // namespace dtrain::app
