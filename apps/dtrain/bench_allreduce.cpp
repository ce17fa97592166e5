// `dtrain bench allreduce`: nccl-tests-style all-reduce bandwidth of dtrain's Gloo
// communicator. Given --workers N it launches N local tasks (through the same
// launcher as `dtrain launch`) that each run this command again inside the
// cluster: join the rendezvous, build the communicator, time every size; the chief
// prints the table (or one JSON object per size).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "comm/bench_allreduce.h"
#include "comm/gloo_communicator.h"
#include "commands.h"
#include "core/error.h"
#include "core/strings.h"
#include "launch/launcher.h"
#include "rendezvous/cluster_session.h"

namespace dtrain::app {
namespace {

// The job a benchmark cluster agrees on: only its runtime settings matter.
constexpr const char* kBenchJob = R"({
  "model": {"input_shape": [1], "layers": [{"type": "Dense", "units": 1}]},
  "loss": "mse", "optimizer": "sgd",
  "data": {"train": {"format": "synthetic", "shape": [1], "count": 1}},
  "train": {}
})";

void print_table(const std::vector<comm::AllReduceResult>& results, bool json) {
  if (json) {
    for (const auto& r : results) std::printf("%s\n", comm::to_json(r).c_str());
    return;
  }
  std::printf("# dtrain all-reduce (Gloo, sum, float32), %d ranks, %d iterations per size\n",
              results.empty() ? 0 : results[0].ranks, results.empty() ? 0 : results[0].iterations);
  std::printf("# %12s %12s %12s %12s %8s\n", "size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "check");
  for (const auto& r : results)
    std::printf("  %12zu %12.1f %12.3f %12.3f %8s\n", r.bytes, r.time_us, r.algbw_gbps, r.busbw_gbps,
                r.correct ? "ok" : "WRONG");
  std::fflush(stdout);
}

// One task of the benchmark cluster (TF_CONFIG set by the launcher).
int run_bench_task(const BenchAllReduceOptions& options) {
  const config::JobConfig job = config::load_job_config(options.config, options.overrides);
  const config::ClusterConfig cluster = config::resolve_cluster(job, std::getenv("TF_CONFIG"), "");
  if (cluster.single_process())
    throw ConfigError("bench allreduce: give --workers N (or run it under TF_CONFIG with several tasks)");
  rendezvous::SessionOptions so;
  if (const char* fd = std::getenv("DTRAIN_LISTEN_FD")) so.listen_fd = std::atoi(fd);
  rendezvous::ClusterSession session(cluster, job, so);
  comm::GlooOptions gloo;
  gloo.rank = session.rank();
  gloo.size = session.world_size();
  gloo.prefix = "comm/bench/";
  gloo.hostname = config::parse_host_port(cluster.spec.address(cluster.task), "this task's address").host;
  auto communicator = comm::make_gloo_communicator(session.store(), gloo);
  const auto results =
      comm::bench_all_reduce(*communicator, comm::parse_size_list(options.sizes), options.iterations, options.warmup);
  if (session.rank() == 0) print_table(results, options.json);
  communicator.reset();
  session.finish();
  bool all_correct = true;
  for (const auto& r : results) all_correct = all_correct && r.correct;
  if (!all_correct) throw RuntimeError("bench allreduce: some results were wrong (see the check column)");
  return 0;
}

}  // namespace

int bench_allreduce_command(const BenchAllReduceOptions& options) {
  comm::parse_size_list(options.sizes);  // a bad list fails here, before any process starts
  if (options.workers == 0) return run_bench_task(options);
  if (options.workers < 2) throw ConfigError("bench allreduce: --workers must be at least 2");
  // The tasks need a job file to agree on; without --config, write a minimal one.
  std::string config = options.config;
  std::filesystem::path temp;
  if (config.empty()) {
    temp = std::filesystem::temp_directory_path() / ("dtrain-bench-" + std::to_string(::getpid()));
    std::filesystem::create_directories(temp);
    config = (temp / "job.json").string();
    std::ofstream(config) << kBenchJob;
  }
  launch::LaunchOptions launch;
  launch.config = config;
  launch.overrides = options.overrides;
  launch.overrides.push_back(str("output.dir=", (temp.empty() ? std::filesystem::path("runs") : temp).string(),
                                 "/bench-allreduce"));
  launch.threads = 1;
  launch.cluster.workers = options.workers;
  launch.command = {"bench", "allreduce", "--sizes", options.sizes, "--iterations",
                    std::to_string(options.iterations), "--warmup", std::to_string(options.warmup)};
  if (options.json) launch.command.push_back("--json");
  launch.task_summaries = false;
  const launch::LaunchReport report = launch::launch_cluster(launch);
  if (!temp.empty()) std::filesystem::remove_all(temp);
  return report.exit_code;
}

}  // namespace dtrain::app
