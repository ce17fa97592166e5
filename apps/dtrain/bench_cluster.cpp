// `dtrain bench allreduce` and `dtrain bench ps`: nccl-tests-style bandwidth of
// dtrain's Gloo all-reduce and of its ps protocol (and, with --device gpu, of
// NCCL over this machine's GPUs in this process). Given --workers N (and --ps M)
// each launches a local cluster (through the same launcher as `dtrain launch`)
// whose tasks run the same command again inside the cluster
// (runtime::bench_allreduce_task, runtime::bench_ps_task): join the rendezvous,
// time every size; the chief prints the table (or one JSON object per size). No
// job file is involved.
#include <filesystem>

#include "commands.h"
#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"
#include "launch/launcher.h"
#include "runtime/run.h"

namespace dtrain::app {
namespace {

// Runs a benchmark's local cluster: `workers` workers and `ps` ps tasks, one
// thread each, each running `dtrain bench <name>` with `request`. Returns the
// launch's exit code.
int launch_bench(const runtime::Environment& env, const std::string& name, const runtime::ClusterBenchRequest& request,
                 int workers, int ps) {
  // The task logs go to a directory of this run's own, removed afterwards.
  const std::filesystem::path logs = std::filesystem::temp_directory_path() / ("dtrain-bench-" + random_hex(6));
  launch::LaunchOptions launch;
  launch.job.output_dir = logs.string();
  launch.tf_config = env.tf_config;  // ignored, with a warning: --workers builds the cluster
  launch.job_secret = env.job_secret;
  launch.omp_num_threads = env.host.omp_num_threads;
  launch.threads = 1;
  launch.cluster.workers = workers;
  launch.cluster.ps = ps;
  launch.plain_stdout = request.json;  // JSON lines on stdout, nothing else there
  launch.task_args = [&](const launch::TaskStart&) {
    std::vector<std::string> args = {"bench", name, "--sizes", request.sizes, "--iterations",
                                     std::to_string(request.iterations), "--warmup", std::to_string(request.warmup)};
    if (request.json) args.push_back("--json");
    if (name == "allreduce")
      args.insert(args.end(), {"--communication", request.communication, "--connections",
                               request.full_mesh ? "full-mesh" : "neighbours"});
    return args;
  };
  const launch::LaunchReport report = launch::launch_cluster(launch);
  std::error_code ignored;
  std::filesystem::remove_all(logs, ignored);
  return report.exit_code;
}

// The benchmark's local cluster fits one launcher (launch::kMaxLaunchTasks).
void check_local_cluster_size(const std::string& bench, int workers, int ps) {
  if (int64_t{workers} + ps > launch::kMaxLaunchTasks)
    throw ConfigError(str(bench, ": --workers ", workers, ps > 0 ? str(" and --ps ", ps, " make ", int64_t{workers} + ps, " tasks")
                                                             : std::string(),
                          ": its local cluster runs at most ", launch::kMaxLaunchTasks, " tasks",
                          " (for more, run `dtrain bench ", bench.substr(6), "` in every task of a cluster you start)"));
}

}  // namespace

int bench_allreduce_command(const BenchAllReduceOptions& options, const runtime::Environment& env) {
  const runtime::ClusterBenchRequest request{options.sizes, options.iterations, options.warmup, options.json,
                                             options.communication, options.connections == "full-mesh"};
  runtime::check_size_list(options.sizes);  // a bad list fails here, before any process starts
  if (options.device == "gpu") {  // NCCL over this machine's GPUs, one thread each, no launcher
    if (options.communication != "auto")
      throw ConfigError(str("bench allreduce: --communication ", options.communication,
                            " is Gloo's; --device gpu runs NCCL (leave --communication out)"));
    if (options.workers < 0) throw ConfigError("bench allreduce: --workers cannot be negative");
    runtime::bench_allreduce_gpus(request, options.workers);
    return 0;
  }
  if (options.workers == 0) {
    runtime::bench_allreduce_task(request, env);
    return 0;
  }
  if (options.workers < 2) throw ConfigError("bench allreduce: --workers must be at least 2");
  check_local_cluster_size("bench allreduce", options.workers, 0);
  return launch_bench(env, "allreduce", request, options.workers, 0);
}

int bench_ps_command(const BenchPsOptions& options, const runtime::Environment& env) {
  const runtime::ClusterBenchRequest request{options.sizes, options.iterations, options.warmup, options.json};
  runtime::check_size_list(options.sizes);
  if (options.workers == 0) {
    runtime::bench_ps_task(request, env);
    return 0;
  }
  if (options.ps < 1) throw ConfigError("bench ps: --ps must be at least 1");
  check_local_cluster_size("bench ps", options.workers, options.ps);
  return launch_bench(env, "ps", request, options.workers, options.ps);
}

}  // namespace dtrain::app
