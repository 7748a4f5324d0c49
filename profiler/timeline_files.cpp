#include "profiler/timeline_files.hpp"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/errors.hpp"
#include "profiler/html_exporter.hpp"
#include "profiler/memory_viz_exporter.hpp"
#include "profiler/perfetto_exporter.hpp"
#include "profiler/text_report.hpp"

namespace tp::profiler {

timeline_format format_for_path(std::string_view path) {
  const auto dot = path.rfind('.');
  const auto slash = path.find_last_of("/\\");
  std::string ext;
  if (dot != std::string_view::npos && (slash == std::string_view::npos || dot > slash)) {
    for (char c : path.substr(dot + 1)) ext += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (ext == "json") return timeline_format::perfetto_json;
  if (ext == "pickle" || ext == "pkl") return timeline_format::memory_viz_pickle;
  if (ext == "html" || ext == "htm") return timeline_format::html;
  if (ext == "txt") return timeline_format::text;
  throw invalid_argument("tensorpager: cannot tell the timeline format of '" + std::string(path) +
                         "' from its extension; accepted: .json (Perfetto / chrome://tracing), .pickle or .pkl "
                         "(PyTorch memory_viz), .html (a self-contained page), .txt (a text report)");
}

std::string render_timeline(const timeline& t, timeline_format f, const timeline_file_options& o) {
  switch (f) {
    case timeline_format::perfetto_json: return to_perfetto_json(t);
    case timeline_format::memory_viz_pickle: return to_memory_viz_pickle(t);
    case timeline_format::html: {
      html_options h;
      h.top_n = o.top_n;
      return to_html(t, h);
    }
    case timeline_format::text: return to_text_report(t, o.top_n);
  }
  return {};
}

void write_timeline_file(const timeline& t, const std::string& path, const timeline_file_options& o) {
  const std::string contents = render_timeline(t, format_for_path(path), o);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (f) f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!f) {
      const int err = errno;
      std::remove(tmp.c_str());
      throw error("tensorpager: cannot write the timeline to '" + path + "': " + std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw error("tensorpager: cannot write the timeline to '" + path + "': " + std::strerror(err));
  }
}

}  // namespace tp::profiler
