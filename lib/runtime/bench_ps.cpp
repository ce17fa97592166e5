// bench_ps_task() (run.h): one task of `dtrain bench ps`. Like `bench allreduce`
// it needs no job file (bench_session_spec); a ps task serves each size, the
// training tasks (chief and workers, in rank order) are the benchmark's workers,
// and rank 0 prints the table.
#include <cstdio>

#include "comm/bench_allreduce.h"
#include "core/error.h"
#include "core/strings.h"
#include "ps/bench_ps.h"
#include "runtime/cluster_task.h"
#include "runtime/run.h"

namespace dtrain::runtime {
namespace {

void print_table(const std::vector<ps::PsBenchResult>& results, bool json) {
  if (json) {
    for (const auto& r : results) std::printf("%s\n", ps::to_json(r).c_str());
    std::fflush(stdout);
    return;
  }
  if (results.empty()) return;
  std::printf("# dtrain ps push/pull (float32, async, plain SGD on the ps), %d worker(s), %d ps, %d iterations per "
              "size\n# a pull or push moves the whole variable (size) from or to every ps (its part per ps); MB/s per "
              "ps counts every worker's bytes\n",
              results[0].workers, results[0].ps, results[0].iterations);
  std::printf("# %12s %12s %11s %14s %11s %14s %7s\n", "size (B)", "per ps (B)", "pull (us)", "pull MB/s/ps",
              "push (us)", "push MB/s/ps", "check");
  for (const auto& r : results)
    std::printf("  %12zu %12zu %11.1f %14.1f %11.1f %14.1f %7s\n", r.bytes, r.bytes_per_ps, r.pull_us,
                r.pull_mbps_per_ps, r.push_us, r.push_mbps_per_ps, r.correct ? "ok" : "WRONG");
  std::fflush(stdout);
}

}  // namespace

void bench_ps_task(const ClusterBenchRequest& request, const Environment& env) {
  ps::PsBenchOptions options;
  options.sizes = comm::parse_size_list(request.sizes);
  options.iterations = request.iterations;
  options.warmup = request.warmup;
  const rendezvous::SessionSpec spec = bench_session_spec("bench ps", request.parameters(), env);
  const config::ClusterSpec& cluster = spec.cluster.spec;
  if (spec.cluster.single_process() || cluster.count(config::TaskType::kPs) == 0 || cluster.world_size() == 0)
    throw ConfigError("bench ps: give --workers N --ps M (or run it under TF_CONFIG with ps tasks and workers)");
  options.credentials = spec.credentials;
  options.num_ps = cluster.count(config::TaskType::kPs);
  for (const config::TaskId& t : cluster.all_tasks())
    if (cluster.rank(t) >= 0) options.workers.push_back(t.str());
  ClusterTask task(spec);
  rendezvous::ClusterSession& session = task.session();
  options.check_health = [&session] { session.check_health(); };
  const config::TaskId& me = spec.cluster.task;
  std::vector<ps::PsBenchResult> results;
  if (me.is(config::TaskType::kPs)) {
    const config::HostPort address = config::parse_host_port(cluster.address(me), "this ps's address");
    ps::serve_ps_bench(session.store(), me.index, address.host, options);
  } else if (session.rank() >= 0) {
    results = ps::run_ps_bench_worker(session.store(), session.rank(), options);
    if (session.rank() == 0) print_table(results, request.json);
  }
  session.finish();
  for (const auto& r : results)
    if (!r.correct) throw RuntimeError("bench ps: some values pulled were wrong (see the check column)");
}

}  // namespace dtrain::runtime
