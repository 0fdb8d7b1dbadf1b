#include "fusor/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>

namespace fusor {

namespace {

std::mutex& log_mutex() {
  static std::mutex m;
  return m;
}

LogSink& log_sink() {
  static LogSink sink;
  return sink;
}

} // namespace

void log_line(std::string_view line) {
  // One fwrite of the whole line so that concurrent processes sharing stderr interleave
  // at line granularity too.
  std::string text = "fusor: ";
  text.append(line);
  text.push_back('\n');
  std::lock_guard<std::mutex> lock(log_mutex());
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  if (log_sink()) log_sink()(line);
}

LogSink set_log_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(log_mutex());
  return std::exchange(log_sink(), std::move(sink));
}

bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("FUSOR_VERBOSE");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}

} // namespace fusor
