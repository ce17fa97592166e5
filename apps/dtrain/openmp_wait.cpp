// Implementation of openmp_wait.h.
#include "openmp_wait.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace dtrain::app {

void settle_openmp_wait(int argc, char** argv) {
  if (argc < 2 || std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  const char* command = argv[1];
  // (validate too: the plan it prints is the one run would follow)
  bool computes = false;
  for (const char* c : {"run", "bench", "generate", "validate"}) computes = computes || std::strcmp(command, c) == 0;
  if (!computes) return;
  setenv("GOMP_SPINCOUNT", kSpinCount, 1);
  setenv("DTRAIN_OPENMP_WAIT", "dtrain", 1);
  execv("/proc/self/exe", argv);
  // (no /proc: go on with OpenMP's default, and let the plan say so)
  unsetenv("GOMP_SPINCOUNT");
  unsetenv("DTRAIN_OPENMP_WAIT");
}

}  // namespace dtrain::app
