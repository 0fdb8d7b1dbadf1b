// A tiny diagnostics channel: lines go to stderr and to an optional sink (tests capture it).
#pragma once

#include <functional>
#include <string_view>

namespace fusor {

using LogSink = std::function<void(std::string_view)>;

// Writes "fusor: <line>" to stderr and passes <line> (unprefixed) to the installed sink.
// Safe to call from several threads; lines are never interleaved.
void log_line(std::string_view line);

// Installs a sink (an empty function removes it) and returns the previous one. The sink runs
// under the log lock, so it must not call log_line itself.
LogSink set_log_sink(LogSink sink);

// True when FUSOR_VERBOSE=1 (read once, at the first call).
bool verbose();

} // namespace fusor
