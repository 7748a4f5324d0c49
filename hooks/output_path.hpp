#pragma once
// Files tensorpager writes later (at exit, at the end of a budget block):
// checked when their path is given, so that a typo fails at once instead of
// losing the recording at the end of the run.

#include <string>
#include <string_view>

namespace tp::hooks {

/// Throws tp::config_error naming what (the key, "timeline:" or
/// "record_trace:", or the argument, "tensorpager.budget(timeline=...)") and
/// path when path is a folder, or its folder does not exist, is not a folder
/// or is not writable by this process; and, when timeline_format is true,
/// when its extension names no timeline format (.json, .pickle, .html,
/// .txt). An empty path (off) passes. Reads the file system only.
/// Thread-safe.
void check_output_path(std::string_view what, const std::string& path, bool timeline_format);

}  // namespace tp::hooks
