// Implementation of environment.h: the only reader of dtrain's variables.
#include "runtime/environment.h"

#include <cstdlib>

#include "core/error.h"
#include "core/strings.h"

namespace dtrain::runtime {
namespace {

std::string variable(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// A whole non-negative number, or -1 when unset or empty; `strict`: anything else
// is a ConfigError (a variable dtrain sets itself), else it counts as unset (one
// that other tools set, as they set it).
int number(const char* name, bool strict) {
  const std::string text = variable(name);
  if (text.empty()) return -1;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (*end == '\0' && value >= 0 && value <= 1 << 30) return static_cast<int>(value);
  if (strict) throw ConfigError(str(name, "='", text, "': expected a whole number >= 0"));
  return -1;
}

}  // namespace

Environment Environment::from_process() {
  Environment env;
  if (const char* tf = std::getenv("TF_CONFIG")) env.tf_config = tf;
  env.job_secret = variable("DTRAIN_JOB_SECRET");
  env.job_id = variable("DTRAIN_JOB_ID");
  env.listen_fd = number("DTRAIN_LISTEN_FD", true);
  env.inject = variable("DTRAIN_INJECT");
  env.host.omp_num_threads = std::max(0, number("OMP_NUM_THREADS", false));
  env.host.local_rank = number("LOCAL_RANK", false);
  env.host.allow_tf32 = variable("DTRAIN_ALLOW_TF32") != "0";
  return env;
}

}  // namespace dtrain::runtime
