// Out-of-line anchor for the error hierarchy (keeps vtables in one object file),
// and how a stop asked by a signal is said.
#include "core/error.h"

#include <csignal>

namespace dtrain {

std::string stop_reason(int signal) {
  if (signal == SIGINT) return "interrupted (Ctrl-C)";
  if (signal == SIGTERM) return "stopped by SIGTERM";
  return "stopped with the job (another of its tasks was asked to stop)";
}

ExitCode stop_exit_code(int signal) { return signal == SIGINT ? ExitCode::kInterrupted : ExitCode::kPreempted; }

}  // namespace dtrain
