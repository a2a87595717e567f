// File: runtime/core/log.h
// One logging facility (style R29): HART_LOG_{DEBUG,INFO,WARN,ERROR}(fmt, ...),
// printf-style; every line is prefixed with the calling function. The sink is
// replaceable; the default writes to stderr. Not for per-token loops.
#pragma once

#include <functional>
#include <string>

namespace hart {

enum class log_level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

using log_sink = std::function<void(log_level, const std::string& line)>;

/// Messages below `level` are dropped. Default: info (env: HART_LOG=debug|info|warn|error|off).
void log_set_level(log_level level);
log_level log_get_level();
/// Replaces the sink; an empty function restores the stderr sink.
void log_set_sink(log_sink sink);
void log_write(log_level level, const char* func, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

}  // namespace hart

#define HART_LOG_DEBUG(...) ::hart::log_write(::hart::log_level::debug, __func__, __VA_ARGS__)
#define HART_LOG_INFO(...) ::hart::log_write(::hart::log_level::info, __func__, __VA_ARGS__)
#define HART_LOG_WARN(...) ::hart::log_write(::hart::log_level::warn, __func__, __VA_ARGS__)
#define HART_LOG_ERROR(...) ::hart::log_write(::hart::log_level::error, __func__, __VA_ARGS__)
