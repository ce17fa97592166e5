// Implementation of log.h: one mutex so lines from several threads never interleave.
#include "core/log.h"

#include <cstdio>
#include <mutex>

namespace dtrain::log {
namespace {

std::mutex g_mutex;
Level g_level = Level::kInfo;
std::string g_prefix;
std::string g_task_log;  // under g_mutex

}  // namespace

void set_level(Level level) { g_level = level; }
Level level() { return g_level; }

Level level_named(const std::string& name) {
  if (name == "debug") return Level::kDebug;
  if (name == "warn") return Level::kWarn;
  return Level::kInfo;
}

void set_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = prefix;
}

std::string prefix() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_prefix;
}

namespace {
std::string line_locked(const std::string& tag, const std::string& message) {
  return tag.empty() ? str(g_prefix, "dtrain: ", message) : str("dtrain: ", tag, g_prefix, message);
}
}  // namespace

std::string line(const std::string& tag, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return line_locked(tag, message);
}

void set_task_log_file(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_task_log = path;
}

std::string task_log_file() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_task_log;
}

std::string write_detail(const std::string& text) {
  const std::string log_file = task_log_file();
  std::string out;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    out += str(log_file.empty() ? "" : kLogOnlyTag, text.substr(begin, end - begin), "\n");
    begin = end + 1;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
  return log_file;
}

void write(Level level, const std::string& message) {
  const char* tag = level == Level::kWarn ? "warning: " : (level == Level::kDebug ? "debug: " : "");
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%s\n", line_locked(tag, message).c_str());
  std::fflush(stderr);
}

}  // namespace dtrain::log
