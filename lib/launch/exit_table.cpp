// The launcher's account of how each task ended (describe_exit, format_exit_table in
// launcher.h). The meanings follow the exit codes in core/error.h and the README.
#include <signal.h>

#include <algorithm>

#include "core/error.h"
#include "core/strings.h"
#include "launch/launcher.h"

namespace dtrain::launch {
namespace {

std::string code_meaning(int code) {
  switch (code) {
    case 0:
      return "ok";
    case 1:
      return "runtime error";
    case 2:
      return "config or usage error";
    case 3:
      return "data or file error";
    case 4:
      return "peer lost (another task failed)";
    case 5:
      return "timeout";
    case 6:
      return "preempted (SIGTERM): stopped after saving a checkpoint";
    case 127:
      return "could not be started";
    case 130:
      return "interrupted (Ctrl-C): stopped at a step's end, after saving what the job saves";
    default:
      return "failed";
  }
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

}  // namespace

std::string describe_exit(const TaskReport& task) {
  const ExitStatus& s = task.status;
  if (task.late && !s.ok()) return "stopped by the launcher: the job ended before it joined";
  if (s.signal == 0) {
    // (ssh's own failure: dtrain never ends with 255)
    std::string meaning = s.code == 255 && task.over_ssh
                              ? "ssh failed (exit 255: the host could not be reached or logged in to)"
                              : code_meaning(s.code);
    // (an interrupted task's meaning says it stopped as asked)
    if (task.stopped && s.code != 0 && s.code != to_int(ExitCode::kInterrupted))
      meaning += ", after the launcher stopped it";
    return meaning;
  }
  if (s.signal == SIGKILL && !task.injection.empty() && !task.stopped)
    return "killed by the injected fault " + task.injection;
  if (task.stopped) return "stopped by the launcher";
  const bool crash = s.signal == SIGSEGV || s.signal == SIGABRT || s.signal == SIGBUS ||
                     s.signal == SIGFPE || s.signal == SIGILL;
  return str("killed by ", signal_name(s.signal), crash ? " (a crash)" : "");
}

const TaskReport* root_cause(const LaunchReport& report) {
  for (const TaskReport& t : report.tasks)
    if (t.task.str() == report.first_failure) return &t;
  return nullptr;
}

std::string format_exit_table(const LaunchReport& report) {
  size_t width = 4;
  for (const TaskReport& t : report.tasks) width = std::max(width, t.task.str().size());
  width += 2;
  const std::string p = "dtrain: launch: ";
  std::string out;
  if (const TaskReport* root = root_cause(report)) {
    // The first failure first, whole: what a user reads to start with.
    char at[32];
    std::snprintf(at, sizeof at, "%.2f", root->exit_seconds);
    out += p + str("root cause: ", root->task.str(), " (", root->address, ", pid ", root->pid, ") ended with ",
                   root->status.str(), " at ", root->ended_utc, ", ", at, " s after the start: ", describe_exit(*root),
                   "\n");
    out += p + str("  its last error: ", root->last_error.empty() ? "(none on its stderr)" : root->last_error, "\n");
    out += p + str("  its log: ", root->log_path, "\n");
  }
  // Interrupted, and every task stopped as asked: no failure to report.
  if (report.interrupted_by != 0 && report.first_failure.empty())
    out += p + str("interrupted by ", signal_name(report.interrupted_by), " (exit code ", report.exit_code,
                   "): the tasks stopped as asked; how each task ended:\n");
  else
    out += p + str("the job failed (exit code ", report.exit_code, "); how each task ended:\n");
  out += p + "  " + pad("task", width) + pad("exit", 22) + "meaning\n";
  for (const TaskReport& t : report.tasks) {
    const bool first = t.task.str() == report.first_failure;
    out += p + "  " + pad(t.task.str(), width) + pad(t.status.str(), 22) + describe_exit(t) +
           (first ? "   <- first failure" : "") + "\n";
  }
  if (report.interrupted_by != 0 && !report.first_failure.empty())
    out += p + str("stopped by ", signal_name(report.interrupted_by), "\n");
  return out;
}

}  // namespace dtrain::launch
