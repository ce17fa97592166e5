// Implementation of log.h: one mutex so lines from several threads never interleave.
#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace dtrain::log {
namespace {

Level initial_level() {
  const char* env = std::getenv("DTRAIN_LOG_LEVEL");
  if (env && std::strcmp(env, "debug") == 0) return Level::kDebug;
  if (env && std::strcmp(env, "warn") == 0) return Level::kWarn;
  return Level::kInfo;
}

std::mutex g_mutex;
Level g_level = initial_level();
std::string g_prefix;

}  // namespace

void set_level(Level level) { g_level = level; }
Level level() { return g_level; }

void set_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = prefix;
}

std::string prefix() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_prefix;
}

void write(Level level, const std::string& message) {
  const char* tag = level == Level::kWarn ? "warning: " : (level == Level::kDebug ? "debug: " : "");
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "%sdtrain: %s%s\n", g_prefix.c_str(), tag, message.c_str());
  std::fflush(stderr);
}

}  // namespace dtrain::log
