#include "config/config.hpp"

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (in format.h before fmt 11)

#include "core/errors.hpp"
#include "config/compress_spec.hpp"
#include "config/parse_bytes.hpp"
#include "config/text.hpp"

// Writing configuration out as text: a config as the grammar reads it back
// (Note [Configuration grammar] in config.hpp), and the key table as Markdown.
// Reading it is config.cpp.

namespace tp {
namespace {

using config_text::is_blank;
using config_text::trim;

// The blanks parse_config trims (config.cpp): a path that starts or ends with
// one would not read back as written.

}  // namespace

std::string to_string(const config& c) {
  const config defaults;
  std::vector<std::string> out;
  auto add = [&out](std::string_view key, std::string_view value) {
    out.push_back(fmt::format("{}:{}", key, value));
  };
  auto add_path = [&add](std::string_view key, const std::string& path) {
    if (path.empty()) return;
    if (path.find(',') != std::string::npos || trim(path) != path) {
      throw config_error(fmt::format("{} '{}' cannot be written as configuration text: it holds "
                                     "',' or leading/trailing blanks",
                                     key, path));
    }
    add(key, path);
  };

  if (c.backend != defaults.backend) add("backend", to_string(c.backend));
  if (c.budget) add("budget", format_budget(*c.budget));
  if (c.manage != defaults.manage) add("manage", to_string(c.manage));
  if (c.host_budget) {
    if (*c.host_budget == 0) throw config_error("host_budget of 0 bytes cannot be written");
    add("host_budget", format_size_exact(*c.host_budget));
  }
  if (c.host_fallback != defaults.host_fallback) add("host_fallback", to_string(c.host_fallback));
  if (c.max_split_size) {
    if (*c.max_split_size < min_max_split_size) {
      throw config_error(fmt::format("max_split_size {} is below the minimum of {}",
                                     *c.max_split_size, format_size_exact(min_max_split_size)));
    }
    add("max_split_size", format_size_exact(*c.max_split_size));
  }
  if (c.expandable_segments != defaults.expandable_segments) {
    add("expandable_segments", c.expandable_segments ? "True" : "False");
  }
  if (c.policy != defaults.policy) add("policy", to_string(c.policy));
  add_path("timeline", c.timeline);
  if (c.timeline_events != defaults.timeline_events) {
    if (c.timeline_events == 0) throw config_error("timeline_events of 0 cannot be written; it must be > 0");
    add("timeline_events", std::to_string(c.timeline_events));
  }
  add_path("record_trace", c.record_trace);
  if (c.device != defaults.device) add("device", to_string(c.device));
  if (c.sim_capacity != defaults.sim_capacity) {
    if (c.sim_capacity == 0) throw config_error("sim_capacity of 0 bytes cannot be written");
    add("sim_capacity", format_size_exact(c.sim_capacity));
  }
  if (!c.compress.empty()) {
    const std::string problem = compress_spec_problem(c.compress);
    if (!problem.empty() || c.compress.find(',') != std::string::npos) {
      throw config_error(fmt::format("compress '{}' cannot be written as configuration text: {}", c.compress,
                                     problem.empty() ? std::string("it holds ','") : problem));
    }
    add("compress", normalize_compress_spec(c.compress));
  }
  return fmt::format("{}", fmt::join(out, ","));
}

std::string config_keys_markdown() {
  std::string out = "| key | kind | accepted | default | description |\n|---|---|---|---|---|\n";
  for (const auto& k : config_keys()) {
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", k.name, k.kind, k.accepted,
                       k.default_value.empty() ? std::string("(empty)")
                                               : fmt::format("`{}`", k.default_value),
                       k.description);
  }
  return out;
}

}  // namespace tp
