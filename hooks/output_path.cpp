#include "hooks/output_path.hpp"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "core/errors.hpp"
#include "profiler/timeline_files.hpp"

namespace tp::hooks {

void check_output_path(std::string_view what, const std::string& path, bool timeline_format) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  const std::string where = std::string(what) + path + ": ";
  if (timeline_format) {
    try {
      (void)profiler::format_for_path(path);
    } catch (const invalid_argument& e) {
      throw config_error(where + e.what());
    }
  }
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw config_error(where + "is a folder; give a file to write");
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  const std::string shown = "the folder '" + folder.string() + "'";
  if (!fs::exists(folder, ec)) {
    throw config_error(where + shown + " does not exist; create it first, or choose a path in an existing folder");
  }
  if (!fs::is_directory(folder, ec)) throw config_error(where + shown + " is not a folder");
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw config_error(where + shown + " is not writable by this process; choose a path in a writable folder");
  }
}

}  // namespace tp::hooks
