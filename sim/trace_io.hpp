#pragma once
// Reading and writing tensorpager's trace format (docs/trace_format.md): JSON
// lines, a header line, then storage, op, free and step lines.

#include <iosfwd>
#include <string>

#include "sim/trace.hpp"

namespace tp::sim {

/// The header's "format" value.
inline constexpr const char* trace_format_name = "tensorpager-trace";
inline constexpr int trace_format_version = 1;

/// Parses a trace from `in`; `what` names the input in errors (a file name).
/// Throws tp::error naming `what`, the line number and what the line should
/// have held when a line is malformed, and when the result fails
/// trace::validate. Thread-safety: none needed (no shared state).
trace read_trace(std::istream& in, const std::string& what);
/// Opens and reads `path`; throws tp::error when it cannot be opened.
trace read_trace_file(const std::string& path);

/// Writes t (which must validate) in the format read_trace reads. Pure
/// except for the stream.
void write_trace(std::ostream& out, const trace& t);

}  // namespace tp::sim
