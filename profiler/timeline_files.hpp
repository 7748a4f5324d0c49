#pragma once
// Writing a timeline to a file whose extension chooses the format.

#include <cstddef>
#include <string>
#include <string_view>

#include "profiler/timeline.hpp"

namespace tp::profiler {

enum class timeline_format { perfetto_json, memory_viz_pickle, html, text };

/// The format for a path's extension (case-insensitive): .json,
/// .pickle/.pkl, .html/.htm, .txt. Throws tp::invalid_argument naming the
/// path and listing the accepted extensions otherwise. Pure.
timeline_format format_for_path(std::string_view path);

struct timeline_file_options {
  /// Rows of the largest-blocks table (.html, .txt).
  std::size_t top_n = 20;
};

/// The file's contents for format f. Pure; throws std::bad_alloc.
std::string render_timeline(const timeline& t, timeline_format f, const timeline_file_options& o = {});

/// Writes t to path in the format of its extension, replacing the file
/// atomically (a temporary file renamed over it). Throws what
/// format_for_path throws, and tp::error naming the path when the file
/// cannot be written. Thread-safe for different paths.
void write_timeline_file(const timeline& t, const std::string& path, const timeline_file_options& o = {});

}  // namespace tp::profiler
