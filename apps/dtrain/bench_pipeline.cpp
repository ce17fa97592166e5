// `dtrain bench pipeline`: the job of --config as a pipeline of --stages S local
// tasks (strategy.stages "auto", one thread each) with --micro-batches M, once
// under each schedule (gpipe, 1f1b), and under multi_worker_mirrored on the same S
// tasks at the same global batch (batch_size_per_replica / S per task). Each run
// is a local cluster through the same launcher as `dtrain launch`, training
// --steps steps; the tasks' summaries give samples/s (the chief's, evaluation and
// loading excluded), each stage's measured bubble (1 - busy / step time: the share
// of a step it waited for its neighbours), the micro-batch inputs it held at its
// peak, and its peak activation bytes as measured (tensor/memory_scope.h) next to
// the memory estimate's. Printed: the bubble averaged over the stages next to the
// ideal pipeline's (S - 1) / (M + S - 1), held inputs and activation bytes per
// stage, and samples/s against multi_worker_mirrored's.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "job/job_config.h"
#include "launch/launcher.h"
#include "strategy/pipeline.h"

namespace dtrain::app {
namespace {

struct BenchRun {
  std::string name;  // "gpipe", "1f1b", "multi_worker_mirrored"
  double samples_per_sec = 0.0;
  std::vector<nlohmann::json> stages;  // each task's "pipeline" report, in task order
};

// One local cluster of `tasks` tasks running the job with `overrides` added.
BenchRun run_cluster(const BenchPipelineOptions& options, const runtime::Environment& env, const std::string& name,
                     const std::vector<std::string>& overrides, const std::filesystem::path& dir) {
  JobOptions job = options.job;
  job.overrides.insert(job.overrides.end(), overrides.begin(), overrides.end());
  job.overrides.push_back("output.dir=" + (dir / name).string());
  job.overrides.push_back("train.epochs=1");
  job.overrides.push_back(str("train.steps_per_epoch=", options.steps));
  job.threads = 1;
  launch::LaunchOptions launch;
  launch.job.output_dir = (dir / name).string();
  launch.tf_config = env.tf_config;
  launch.job_secret = env.job_secret;
  launch.threads = 1;
  launch.cluster.workers = options.stages;
  launch.plain_stdout = options.json;
  launch.task_args = [&job](const launch::TaskStart& start) {
    std::vector<std::string> args = {"run", "--config", job.config};
    for (const std::string& o : job.overrides) args.insert(args.end(), {"--set", o});
    args.insert(args.end(), {"--summary", start.summary_path, "--threads", "1"});
    return args;
  };
  // The tasks' progress stays in their logs: stdout has the table (or JSON lines) only.
  const int quiet = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (quiet < 0) throw IoError("bench pipeline: cannot open /dev/null");
  launch.stdout_fd = quiet;
  std::fprintf(stderr, "dtrain: bench pipeline: running %s on %d tasks\n", name.c_str(), options.stages);
  launch::LaunchReport report;
  try {
    report = launch::launch_cluster(launch);
  } catch (...) {
    ::close(quiet);
    throw;
  }
  ::close(quiet);
  if (report.exit_code != 0)
    throw RuntimeError(str("bench pipeline: the ", name, " run failed (exit ", report.exit_code,
                           "); its task logs are in ", (dir / name / "logs").string()));
  BenchRun run;
  run.name = name;
  for (const launch::TaskReport& t : report.tasks) {
    if (t.summary_json.empty()) throw RuntimeError(str("bench pipeline: ", t.task.str(), " wrote no summary"));
    const nlohmann::json s = nlohmann::json::parse(t.summary_json);
    if (t.task.index == 0) run.samples_per_sec = s.at("train_samples_per_sec").get<double>();
    if (!s.contains("pipeline")) continue;
    nlohmann::json stage = s["pipeline"];
    // The estimate of what the steps hold: forward's activations and backward's buffers.
    if (s.contains("memory"))
      stage["estimated_activation_bytes"] =
          s["memory"].value("activations", int64_t{0}) + s["memory"].value("backward_buffers", int64_t{0});
    run.stages.push_back(stage);
  }
  return run;
}

double mean_bubble(const BenchRun& run) {
  double sum = 0.0;
  for (const nlohmann::json& s : run.stages) sum += s.at("bubble").get<double>();
  return run.stages.empty() ? 0.0 : sum / static_cast<double>(run.stages.size());
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

int bench_pipeline_command(const BenchPipelineOptions& options, const runtime::Environment& env) {
  std::vector<std::string> overrides = options.job.overrides;
  const job::JobConfig job = job::load_job_config(options.job.config, overrides);
  const int64_t batch = job.train.batch_size_per_replica;
  if (batch % options.micro_batches != 0)
    throw ConfigError(str("bench pipeline: --micro-batches ", options.micro_batches,
                          " does not divide the job's train.batch_size_per_replica ", batch));
  if (batch % options.stages != 0)
    throw ConfigError(str("bench pipeline: multi_worker_mirrored on ", options.stages,
                          " tasks splits the batch of ", batch, " among them; use a batch divisible by --stages"));
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("dtrain-bench-pipeline-" + random_hex(6));
  std::vector<BenchRun> runs;
  for (const char* schedule : {"gpipe", "1f1b"})
    runs.push_back(run_cluster(options, env, schedule,
                               {"strategy.type=pipeline", "strategy.stages=auto",
                                str("strategy.micro_batches=", options.micro_batches),
                                str("strategy.schedule=", schedule)},
                               dir));
  const BenchRun mwms =
      run_cluster(options, env, "multi_worker_mirrored",
                  {"strategy.type=multi_worker_mirrored", str("train.batch_size_per_replica=", batch / options.stages)},
                  dir);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);

  const double theory = strategy::theoretical_bubble(options.stages, options.micro_batches);
  if (options.json) {
    for (const BenchRun& r : runs) {
      nlohmann::json stages = nlohmann::json::array();
      for (const nlohmann::json& s : r.stages)
        stages.push_back({{"stage", s["stage"]},
                          {"bubble", s["bubble"]},
                          {"peak_inputs_held", s["peak_inputs_held"]},
                          {"peak_input_bytes", s["peak_input_bytes"]},
                          {"peak_activation_bytes", s["peak_activation_bytes"]},
                          {"estimated_activation_bytes", s.value("estimated_activation_bytes", int64_t{0})},
                          {"recomputed_forwards", s["recomputed_forwards"]}});
      std::printf("%s\n", nlohmann::json{{"config", options.job.config},
                                         {"schedule", r.name},
                                         {"stages", options.stages},
                                         {"micro_batches", options.micro_batches},
                                         {"split", r.stages.empty() ? "" : r.stages[0]["split"]},
                                         {"global_batch", batch},
                                         {"bubble", mean_bubble(r)},
                                         {"theoretical_bubble", theory},
                                         {"samples_per_sec", r.samples_per_sec},
                                         {"multi_worker_mirrored_samples_per_sec", mwms.samples_per_sec},
                                         {"per_stage", stages}}
                                .dump()
                                .c_str());
    }
    return 0;
  }
  std::printf("%s: %d stages (%s), %d micro-batches, global batch %lld, %lld steps, 1 thread per task\n",
              options.job.config.c_str(), options.stages,
              runs[0].stages.empty() ? "" : runs[0].stages[0]["split"].get<std::string>().c_str(),
              options.micro_batches, static_cast<long long>(batch), options.steps);
  std::printf("%-24s %10s %10s %12s %10s  %s\n", "run", "bubble", "(S-1)/(M+S-1)", "samples/s", "vs mwms",
              "per stage: inputs held (count / MiB), activation MiB measured (estimate)");
  for (const BenchRun& r : runs) {
    std::vector<std::string> held;
    for (const nlohmann::json& s : r.stages)
      held.push_back(str(s["peak_inputs_held"].get<int64_t>(), " / ", mib(s["peak_input_bytes"].get<int64_t>()), ", ",
                         mib(s["peak_activation_bytes"].get<int64_t>()), " (",
                         mib(s.value("estimated_activation_bytes", int64_t{0})), ")"));
    std::printf("%-24s %10.3f %13.3f %12.0f %9.2fx  %s\n", ("pipeline " + r.name).c_str(), mean_bubble(r), theory,
                r.samples_per_sec, r.samples_per_sec / std::max(mwms.samples_per_sec, 1e-9), join(held, " | ").c_str());
  }
  std::printf("%-24s %10s %13s %12.0f %9.2fx\n", "multi_worker_mirrored", "-", "-", mwms.samples_per_sec, 1.0);
  return 0;
}

}  // namespace dtrain::app
