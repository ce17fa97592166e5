// Where a task learns its cluster and its own place in it: runtime.cluster_resolver.
//
//   tf_config   the job file's `cluster`/`task`, TF_CONFIG and --task (TF's rules: cluster_spec.h)
//   slurm       a Slurm step's variables, as TF's SlurmClusterResolver (slurm.h)
//   kubernetes  an Indexed Job behind a headless Service (kubernetes.h)
//   env         PyTorch's env:// variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
//               LOCAL_RANK): WORLD_SIZE workers, RANK 0 the chief at MASTER_ADDR:MASTER_PORT;
//               the others' addresses are learnt at start (registers_addresses)
//   auto        the first that applies, in that order: --task or the file's cluster,
//               else TF_CONFIG; else Slurm's variables inside a step (SLURM_PROCID and
//               SLURM_STEP_NODELIST); else an Indexed Job's (JOB_COMPLETION_INDEX);
//               else the env:// variables; none of them: one process alone.
//
// Pure: the variables come in an EnvVars map (the runtime read them once).
#pragma once

#include <string>
#include <vector>

#include "config/cluster_spec.h"
#include "config/job_file.h"

namespace dtrain::config {

inline const std::vector<std::string> kClusterResolvers = {"auto", "tf_config", "slurm", "kubernetes", "env"};

// The variables the resolvers read (what the runtime copies into EnvVars).
bool is_cluster_variable(const std::string& name);

// What `dtrain cluster --json` prints: {"cluster": {type: [address...]}, "task":
// {"type", "index"} (null alone), "source": "slurm" (or "TF_CONFIG", the job file,
// "kubernetes", "local" alone), "job_id" (or null), "local_rank" (or null)}.
std::string cluster_config_json(const ClusterConfig& cluster);

// This process's cluster and task; ClusterConfig::source says which resolver gave
// them ("TF_CONFIG" or the job file for tf_config). ConfigError naming the variable
// or key otherwise.
ClusterConfig resolve_job_cluster(const FileCluster& file, const RuntimeSpec& runtime, const EnvVars& vars,
                                  const std::string& task_flag);

}  // namespace dtrain::config
