// Implementation of process_memory.h.
#include "core/process_memory.h"

#include <fstream>
#include <sstream>
#include <string>

namespace dtrain {
namespace {

// The value of `key` ("VmRSS:") in /proc/self/status, in bytes (the file says kB).
int64_t status_bytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    int64_t kib = 0;
    fields >> kib;
    return kib * 1024;
  }
  return 0;
}

}  // namespace

int64_t resident_bytes() { return status_bytes("VmRSS:"); }

int64_t peak_resident_bytes() { return status_bytes("VmHWM:"); }

bool reset_peak_resident() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace dtrain
