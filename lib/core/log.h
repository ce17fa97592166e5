// Logging to stderr with an optional task prefix ("[worker:1] ").
//
// Progress and results a user asked for go to stdout (trainer); diagnostics go here.
#pragma once

#include <string>

#include "core/strings.h"

namespace dtrain::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2 };

// Messages below this level are dropped. Default: kInfo (DTRAIN_LOG_LEVEL=debug lowers it).
void set_level(Level level);
Level level();

// Text put in front of every line, e.g. "[worker:1] ". Empty by default.
void set_prefix(const std::string& prefix);
std::string prefix();

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
