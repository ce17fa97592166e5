// Feeds: a Slurm step's variables separated by NUL bytes, in this order:
// SLURM_STEP_NODELIST, SLURM_STEP_TASKS_PER_NODE, SLURM_PROCID,
// SLURM_STEP_NUM_TASKS, SLURM_LOCALID, SLURMD_NODENAME (the last two optional), then
// runtime.slurm_jobs as task types separated by commas, one per task
// ("ps,worker,worker" = {"ps": 1, "worker": 2}).
// Asserts: expand_slurm_hostlist(), expand_slurm_tasks_per_node() and
// resolve_slurm() return or throw a dtrain error with a printable message; a
// resolved cluster holds its task.
#include <utility>

#include "config/slurm.h"
#include "fuzz_support.h"

using namespace dtrain;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<std::string> parts = fuzz::split_input(data, size);
  fuzz::expect_clean([&] { config::expand_slurm_hostlist(parts[0], "SLURM_STEP_NODELIST"); });
  if (parts.size() < 2) return 0;
  fuzz::expect_clean([&] { config::expand_slurm_tasks_per_node(parts[1], "SLURM_STEP_TASKS_PER_NODE"); });
  if (parts.size() < 4) return 0;
  config::EnvVars env = {{"SLURM_STEP_NODELIST", parts[0]},
                         {"SLURM_STEP_TASKS_PER_NODE", parts[1]},
                         {"SLURM_PROCID", parts[2]},
                         {"SLURM_STEP_NUM_TASKS", parts[3]},
                         {"SLURM_JOB_ID", "42"}};
  if (parts.size() > 4 && !parts[4].empty()) env["SLURM_LOCALID"] = parts[4];
  if (parts.size() > 5 && !parts[5].empty()) env["SLURMD_NODENAME"] = parts[5];
  config::SlurmOptions options;
  if (parts.size() > 6) {
    for (const std::string& type : fuzz::split_input(reinterpret_cast<const uint8_t*>(parts[6].data()),
                                                     parts[6].size(), ',')) {
      if (!options.jobs.empty() && options.jobs.back().first == type)
        ++options.jobs.back().second;
      else
        options.jobs.emplace_back(type, 1);
    }
  }
  fuzz::expect_clean([&] {
    const config::ClusterConfig c = config::resolve_slurm(env, options);
    if (!c.spec.contains(c.task)) fuzz::fuzz_fail("resolve_slurm() gave a task outside its cluster", c.task.str());
  });
  return 0;
}
