// Logging to stderr with an optional task prefix ("[worker:1] ").
//
// Progress and results a user asked for go to stdout (trainer); diagnostics go here.
#pragma once

#include <string>

#include "core/strings.h"

namespace dtrain::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2 };

// Messages below this level are dropped. Default: kInfo (main() sets
// DTRAIN_LOG_LEVEL's, which runtime::Environment read: level_named()).
void set_level(Level level);
Level level();
// "debug", "info", "warn" as a Level; kInfo for anything else ("" too).
Level level_named(const std::string& name);

// Text put in front of every line, e.g. "[worker:1] ". Empty by default.
void set_prefix(const std::string& prefix);
std::string prefix();

// One line of this process's stderr, without the newline. A diagnostic says what
// it is first and then which task: "dtrain: error: [worker:1] ...", "dtrain:
// warning: [worker:1] ..." (tag "error: ", "warning: ", "debug: "); other lines
// (tag "") "[worker:1] dtrain: ...". (The README's promise: every error line
// starts with "dtrain: error:".)
std::string line(const std::string& tag, const std::string& message);

// Under `dtrain launch` (which sets DTRAIN_TASK_LOG to this task's log file):
// stderr lines that begin with kLogOnlyTag go to that log file alone, not the
// console. Long detail a console line points at (a flight record) goes there.
inline constexpr const char* kLogOnlyTag = "dtrain-log-only: ";
// This task's log file under `dtrain launch` ("" when not launched): main() sets
// DTRAIN_TASK_LOG's, which runtime::Environment read.
void set_task_log_file(const std::string& path);
std::string task_log_file();
// Writes `text` (lines) to stderr: under `dtrain launch` to the task's log file
// alone (each line tagged), else as it is. Returns the log file ("" if none).
std::string write_detail(const std::string& text);

void write(Level level, const std::string& message);

template <class... Args>
void debug(const Args&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, str(args...));
}
template <class... Args>
void info(const Args&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, str(args...));
}
template <class... Args>
void warn(const Args&... args) {
  write(Level::kWarn, str(args...));
}

}  // namespace dtrain::log
