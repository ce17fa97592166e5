// Implementation of environment.h: the only reader of dtrain's variables.
#include "runtime/environment.h"

#include <unistd.h>

#include <cstdlib>

#include "config/cluster_resolver.h"
#include "core/error.h"
#include "core/strings.h"

namespace dtrain::runtime {
namespace {

std::string variable(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// OMP_NUM_THREADS and LOCAL_RANK as other tools read them (atoi): the leading
// whole number ("4,2", a nested OpenMP list, is 4), or -1 when there is none.
int leading_number(const char* name) {
  const std::string text = variable(name);
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || value < 0 || value > 1 << 30) return -1;
  return static_cast<int>(value);
}

}  // namespace

Environment Environment::from_process() {
  Environment env;
  if (const char* tf = std::getenv("TF_CONFIG")) env.tf_config = tf;
  for (char** entry = environ; *entry; ++entry) {
    const std::string text = *entry;
    const size_t eq = text.find('=');
    if (eq != std::string::npos && config::is_cluster_variable(text.substr(0, eq)))
      env.cluster_vars[text.substr(0, eq)] = text.substr(eq + 1);
  }
  env.job_secret = variable("DTRAIN_JOB_SECRET");
  env.job_id = variable("DTRAIN_JOB_ID");
  env.listen_fd = variable("DTRAIN_LISTEN_FD");
  env.inject = variable("DTRAIN_INJECT");
  env.sample_log_dir = variable("DTRAIN_SAMPLE_LOG");
  env.log_level = variable("DTRAIN_LOG_LEVEL");
  env.task_log = variable("DTRAIN_TASK_LOG");
  env.progress_columns = std::max(0, leading_number("DTRAIN_PROGRESS_COLUMNS"));
  env.host.omp_num_threads = std::max(0, leading_number("OMP_NUM_THREADS"));
  env.host.local_rank = leading_number("LOCAL_RANK");
  if (const char* id = std::getenv("NCCL_HOSTID")) env.host.nccl_hostid = id;
  if (const char* tf32 = std::getenv("DTRAIN_ALLOW_TF32")) env.host.allow_tf32 = std::string(tf32) != "0";
  if (const std::string policy = variable("OMP_WAIT_POLICY"); !policy.empty())
    env.host.omp_wait = "OMP_WAIT_POLICY=" + policy;
  else if (const std::string spin = variable("GOMP_SPINCOUNT"); !spin.empty())
    env.host.omp_wait = "GOMP_SPINCOUNT=" + spin;
  env.host.omp_wait_by_dtrain = variable("DTRAIN_OPENMP_WAIT") == "dtrain";
  return env;
}

int Environment::listen_socket() const {
  if (listen_fd.empty()) return -1;
  char* end = nullptr;
  const long fd = std::strtol(listen_fd.c_str(), &end, 10);
  if (*end != '\0' || fd < 0 || fd > 1 << 20)
    throw ConfigError(str("DTRAIN_LISTEN_FD='", listen_fd, "': expected the number of an inherited listening socket"));
  return static_cast<int>(fd);
}

}  // namespace dtrain::runtime
