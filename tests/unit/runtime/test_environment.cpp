// The task runtime's reading of the environment: every variable read once, other
// tools' numbers read as they read them, dtrain's own checked where they are used;
// and the injected-fault syntax.
#include <stdlib.h>

#include <optional>
#include <string>

#include <catch2/catch.hpp>

#include "core/error.h"
#include "runtime/environment.h"
#include "runtime/fault_injection.h"

using namespace dtrain;
using Catch::Matchers::Contains;

namespace {

// Sets (or, for nullptr, unsets) a variable for one test case, restoring it after.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedVariable() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("environment: TF_CONFIG, the secret and the host settings are read once") {
  ScopedVariable tf("TF_CONFIG", R"({"cluster": {}})"), secret("DTRAIN_JOB_SECRET", "s"),
      omp("OMP_NUM_THREADS", "4,2"), rank("LOCAL_RANK", "3"), tf32("DTRAIN_ALLOW_TF32", "0"),
      fd("DTRAIN_LISTEN_FD", nullptr);
  const runtime::Environment env = runtime::Environment::from_process();
  REQUIRE(env.tf_config.has_value());
  CHECK(std::string(env.tf_config_or_null()) == R"({"cluster": {}})");
  CHECK(env.job_secret == "s");
  CHECK(env.host.omp_num_threads == 4);  // a nested OpenMP list: its first level, as atoi reads it
  CHECK(env.host.local_rank == 3);
  REQUIRE(env.host.allow_tf32.has_value());
  CHECK_FALSE(*env.host.allow_tf32);
  CHECK(env.listen_socket() == -1);
}

TEST_CASE("environment: unset variables leave their defaults, a bad DTRAIN_LISTEN_FD fails only where used") {
  ScopedVariable tf("TF_CONFIG", nullptr), omp("OMP_NUM_THREADS", "many"), rank("LOCAL_RANK", nullptr),
      tf32("DTRAIN_ALLOW_TF32", nullptr), fd("DTRAIN_LISTEN_FD", "x");
  const runtime::Environment env = runtime::Environment::from_process();  // does not throw
  CHECK(env.tf_config_or_null() == nullptr);
  CHECK(env.host.omp_num_threads == 0);
  CHECK(env.host.local_rank == -1);
  CHECK_FALSE(env.host.allow_tf32.has_value());
  CHECK_THROWS_WITH(env.listen_socket(), Contains("DTRAIN_LISTEN_FD='x'"));
}

TEST_CASE("fault injection: kill@step=N and kill@ckpt_byte=N, anything else is a ConfigError") {
  CHECK(runtime::parse_injected_fault("").kill_step == -1);
  CHECK(runtime::parse_injected_fault("kill@step=20").kill_step == 20);
  CHECK(runtime::parse_injected_fault("kill@ckpt_byte=4096").kill_ckpt_byte == 4096);
  for (const char* bad : {"kill@step=0", "kill@step=-1", "kill@step=2x", "kill@epoch=1", "step=3"})
    CHECK_THROWS_AS(runtime::parse_injected_fault(bad), ConfigError);
}
