// bench_allreduce_task() (run.h): one task of `dtrain bench allreduce`. It needs
// no job file: the cluster comes from TF_CONFIG, the secret and job id from the
// environment (the launcher sets all three), and the tasks agree on the
// benchmark's own parameters instead of a config hash. bench_allreduce_gpus():
// the same with NCCL over this machine's GPUs, in this process.
#include <algorithm>
#include <cstdio>
#include <set>

#include "comm/bench_allreduce.h"
#include "comm/gloo/gloo_communicator.h"
#include "core/error.h"
#include "core/strings.h"
#include "core/timer.h"
#include "kernels/device.h"
#include "runtime/cluster_task.h"
#include "runtime/run.h"
#include "strategy/registry.h"

namespace dtrain::runtime {
namespace {

void print_table(const std::vector<comm::AllReduceResult>& results, bool json, const std::string& communication) {
  if (json) {
    for (const auto& r : results) std::printf("%s\n", comm::to_json(r).c_str());
    return;
  }
  std::printf("# dtrain all-reduce (communication %s, sum, float32), %d ranks, %d iterations per size\n",
              communication.c_str(), results.empty() ? 0 : results[0].ranks,
              results.empty() ? 0 : results[0].iterations);
  std::printf("# %12s %12s %12s %12s %8s\n", "size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "check");
  for (const auto& r : results)
    std::printf("  %12zu %12.1f %12.3f %12.3f %8s\n", r.bytes, r.time_us, r.algbw_gbps, r.busbw_gbps,
                r.correct ? "ok" : "WRONG");
  std::fflush(stdout);
}

// nccl-tests' table: size, count, type, redop, time, algbw, busbw, #wrong.
void print_gpu_table(const std::vector<comm::AllReduceResult>& results, bool json, const std::string& gpus) {
  if (json) {
    for (const auto& r : results) std::printf("%s\n", comm::to_json(r).c_str());
    return;
  }
  std::printf("# dtrain all-reduce over NCCL, %d rank(s) on %s, in place, %d iterations per size\n",
              results.empty() ? 0 : results[0].ranks, gpus.c_str(), results.empty() ? 0 : results[0].iterations);
  std::printf("# %12s %12s %8s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop", "time", "algbw", "busbw",
              "#wrong");
  std::printf("# %12s %12s %8s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "");
  for (const auto& r : results)
    std::printf("  %12zu %12zu %8s %6s %10.2f %8.2f %8.2f %7zu\n", r.bytes, r.bytes / sizeof(float), "float", "sum",
                r.time_us, r.algbw_gbps, r.busbw_gbps, r.wrong);
  std::fflush(stdout);
}

// What connecting cost each rank: its Gloo pairs and the seconds its
// connect_training_tasks took, gathered to every rank; rank 0 prints one line.
void report_setup(comm::Communicator& communicator, double seconds, int rank, bool json) {
  const int n = communicator.size();
  const std::vector<float> mine{static_cast<float>(comm::gloo_connect_stats().pairs), static_cast<float>(seconds)};
  std::vector<float> all(2 * static_cast<size_t>(n));
  communicator.all_gather(mine.data(), 2, all.data());
  if (rank != 0) return;
  int64_t pairs = 0, most = 0;
  std::vector<double> times;
  for (int r = 0; r < n; ++r) {
    pairs += static_cast<int64_t>(all[2 * r]);
    most = std::max(most, static_cast<int64_t>(all[2 * r]));
    times.push_back(all[2 * r + 1]);
  }
  std::sort(times.begin(), times.end());
  const int64_t connections = pairs / 2, mesh = int64_t{n} * (n - 1) / 2;
  if (json) {
    std::printf("{\"setup\": true, \"ranks\": %d, \"connections\": %lld, \"connections_per_rank_max\": %lld, "
                "\"full_mesh_connections\": %lld, \"connect_seconds_max\": %.4f, \"connect_seconds_median\": %.4f}\n",
                n, static_cast<long long>(connections), static_cast<long long>(most), static_cast<long long>(mesh),
                times.back(), times[times.size() / 2]);
  } else {
    std::printf("# Gloo set-up: %d ranks, %lld connections (at most %lld per rank; a full mesh is %lld), "
                "connected in %.3f s on the slowest rank (median %.3f s)\n",
                n, static_cast<long long>(connections), static_cast<long long>(most), static_cast<long long>(mesh),
                times.back(), times[times.size() / 2]);
  }
  std::fflush(stdout);
}

}  // namespace

void bench_allreduce_gpus(const ClusterBenchRequest& request, int gpus) {
  const std::vector<size_t> sizes = comm::parse_size_list(request.sizes);
  const kernels::GpuReport report = kernels::list_gpus();
  if (report.gpus.empty())
    throw ConfigError(str("bench allreduce --device gpu: no usable GPU: ", report.why_none,
                          "; run it on a machine with an NVIDIA GPU, or leave out --device gpu (Gloo on the CPU)"));
  const int available = static_cast<int>(report.gpus.size());
  if (gpus > available)
    throw ConfigError(str("bench allreduce --device gpu: --workers ", gpus, " but this machine has ", available,
                          " usable GPU(s); give at most ", available, " or leave --workers out (all of them)"));
  std::vector<int> devices;
  std::vector<std::string> names;
  for (int i = 0; i < (gpus > 0 ? gpus : available); ++i) {
    devices.push_back(report.gpus[static_cast<size_t>(i)].index);
    names.push_back(str("cuda:", devices.back()));
  }
  const double deadline = 60.0;  // of joining and of each wait
  const auto results = comm::bench_nccl_all_reduce(devices, sizes, request.iterations, request.warmup, deadline);
  print_gpu_table(results, request.json, join(names, ", "));
  for (const auto& r : results)
    if (!r.correct) throw RuntimeError("bench allreduce: some results were wrong (see the #wrong column)");
}

void check_size_list(const std::string& sizes) { comm::parse_size_list(sizes); }

std::string ClusterBenchRequest::parameters() const {
  return str("sizes=", sizes, " iterations=", iterations, " warmup=", warmup, " communication=", communication,
             " connections=", full_mesh ? "full-mesh" : "neighbours");
}

void bench_allreduce_task(const ClusterBenchRequest& request, const Environment& env) {
  const std::vector<size_t> sizes = comm::parse_size_list(request.sizes);
  const rendezvous::SessionSpec spec = bench_session_spec("bench allreduce", request.parameters(), env);
  if (spec.cluster.single_process())
    throw ConfigError("bench allreduce: give --workers N (or run it under TF_CONFIG with several tasks)");
  ClusterTask task(spec);
  const double collective_deadline = 60.0;  // of connecting and of each all-reduce
  const std::vector<std::string> hosts = task.host_of_rank();
  const plan::TasksGroup group = plan::training_tasks_group(
      strategy::communication_by_name(request.communication), false, static_cast<int>(hosts.size()),
      static_cast<int>(std::set<std::string>(hosts.begin(), hosts.end()).size()));
  Stopwatch connecting;
  auto communicator = task.connect_training_tasks("comm/bench/", collective_deadline, group, request.full_mesh);
  report_setup(*communicator, connecting.seconds(), task.session().rank(), request.json);
  const auto results = comm::bench_all_reduce(*communicator, sizes, request.iterations, request.warmup);
  if (task.session().rank() == 0) print_table(results, request.json, request.communication);
  communicator.reset();
  task.session().finish();
  bool all_correct = true;
  for (const auto& r : results) all_correct = all_correct && r.correct;
  if (!all_correct) throw RuntimeError("bench allreduce: some results were wrong (see the check column)");
}

}  // namespace dtrain::runtime
