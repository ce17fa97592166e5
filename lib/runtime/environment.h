// Environment: every environment variable dtrain's tasks read, read in one place
// (Environment::from_process(), called by main) and handed down as plain values.
// Library code below the runtime never calls getenv for them.
//
//   TF_CONFIG           the cluster and this task (TensorFlow's rules)
//   SLURM_*, JOB_COMPLETION_INDEX, HOSTNAME, DTRAIN_KUBERNETES_*, MASTER_ADDR,
//   MASTER_PORT, WORLD_SIZE, RANK
//                       what the other cluster resolvers read (config/cluster_resolver.h)
//   DTRAIN_JOB_SECRET   the shared secret of a multi-task job
//   DTRAIN_JOB_ID       the job's name in the rendezvous handshake
//   DTRAIN_LISTEN_FD    the chief's listening socket, inherited from `dtrain launch`
//   DTRAIN_INJECT       a fault for tests and demos: kill@step=N, kill@ckpt_byte=N
//   OMP_NUM_THREADS     compute threads when runtime.threads is 0
//   LOCAL_RANK          the task's index on its machine (torchrun's name): picks its GPU
//   DTRAIN_ALLOW_TF32   0 turns TF32 convolutions off
//   OMP_WAIT_POLICY, GOMP_SPINCOUNT, DTRAIN_OPENMP_WAIT
//                       how OpenMP's threads wait, and whether dtrain chose it (the plan says)
#pragma once

#include <optional>
#include <string>

#include "config/cluster_resolver.h"
#include "trainer/trainer.h"

namespace dtrain::runtime {

struct Environment {
  std::optional<std::string> tf_config;  // nullopt when unset
  config::EnvVars cluster_vars;          // every variable a cluster resolver reads (TF_CONFIG too), as set
  std::string job_secret;
  std::string job_id;
  std::string listen_fd;  // DTRAIN_LISTEN_FD as set ("" = unset); read it with listen_socket()
  std::string inject;
  // DTRAIN_SAMPLE_LOG: a directory where each training task writes, step by
  // step, when the step was done and the dataset index of every sample it
  // trained on (<type>-<index>.samples: "epoch step unix_us index ..."): the
  // audit that an elastic job's epochs see each sample once.
  std::string sample_log_dir;
  std::string log_level;  // DTRAIN_LOG_LEVEL ("debug", "info", "warn"; "" = unset): log::level_named
  std::string task_log;   // DTRAIN_TASK_LOG: this task's log file under `dtrain launch` ("" = not launched)
  int progress_columns = 0;  // DTRAIN_PROGRESS_COLUMNS: `dtrain launch` shows this task's progress in that width
  trainer::HostSettings host;  // OMP_NUM_THREADS, LOCAL_RANK, DTRAIN_ALLOW_TF32

  // TF_CONFIG as resolve_cluster() takes it (nullptr when unset).
  const char* tf_config_or_null() const { return tf_config ? tf_config->c_str() : nullptr; }
  // This task's cluster as job.runtime.cluster_resolver says (cluster_resolver.h).
  config::ClusterConfig resolve_cluster(const config::FileCluster& file, const config::RuntimeSpec& runtime,
                                        const std::string& task_flag) const {
    return config::resolve_job_cluster(file, runtime, cluster_vars, task_flag);
  }

  // The inherited listening socket, -1 when DTRAIN_LISTEN_FD is unset; a value
  // that is not a descriptor number is a ConfigError naming the variable (only the
  // tasks that serve the rendezvous ask).
  int listen_socket() const;

  // Reads the variables above from this process's environment; never throws (a
  // bad value is reported by the code that needs it).
  static Environment from_process();
};

}  // namespace dtrain::runtime
