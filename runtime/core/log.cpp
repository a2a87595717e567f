#include "runtime/core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace hart {
namespace {

log_level level_from_env() {
  const char* v = std::getenv("HART_LOG");
  if (!v) return log_level::info;
  if (!std::strcmp(v, "debug")) return log_level::debug;
  if (!std::strcmp(v, "warn")) return log_level::warn;
  if (!std::strcmp(v, "error")) return log_level::error;
  if (!std::strcmp(v, "off")) return log_level::off;
  return log_level::info;
}

std::atomic<log_level>& current_level() {
  static std::atomic<log_level> level{level_from_env()};
  return level;
}

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

log_sink& current_sink() {
  static log_sink sink;
  return sink;
}

const char* level_tag(log_level l) {
  switch (l) {
    case log_level::debug:
      return "D";
    case log_level::info:
      return "I";
    case log_level::warn:
      return "W";
    case log_level::error:
      return "E";
    default:
      return "?";
  }
}

}  // namespace

void log_set_level(log_level level) {
  current_level().store(level);
}
log_level log_get_level() {
  return current_level().load();
}

void log_set_sink(log_sink sink) {
  std::lock_guard<std::mutex> lock(sink_mutex());
  current_sink() = std::move(sink);
}

void log_write(log_level level, const char* func, const char* fmt, ...) {
  if (level < current_level().load()) return;
  char buf[2048];
  int n = std::snprintf(buf, sizeof(buf), "%s: ", func);
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf + n, sizeof(buf) - n, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(sink_mutex());
  if (current_sink()) {
    current_sink()(level, buf);
  } else {
    std::fprintf(stderr, "[hart %s] %s\n", level_tag(level), buf);
  }
}

}  // namespace hart
