// Implementation of host.h.
#include "core/host.h"

#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <thread>

namespace dtrain {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

std::string host_identity() {
  // Read once per process: neither changes while it runs.
  static const std::string identity = [] {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
    std::string boot_id;
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::getline(in, boot_id);
    return std::string(name) + "/" + boot_id;
  }();
  return identity;
}

}  // namespace dtrain
