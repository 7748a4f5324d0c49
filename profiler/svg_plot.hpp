#pragma once
// The stacked memory plot of the HTML page, drawn as inline SVG so that the
// page shows it with scripts disabled and nothing fetched.

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/timeline_analysis.hpp"

namespace tp::profiler {

/// The colour of each category, and of the two non-category bands, shared by
/// the plot and the page's legend and tables.
const char* category_colour(category c);
inline constexpr const char* cached_free_colour = "#dcdcdc";
inline constexpr const char* host_colour = "#76b7b2";
inline constexpr const char* budget_colour = "#d62728";

struct svg_plot_options {
  int width = 1160;
  int height = 440;
  /// Times are drawn relative to this (the recording's first event).
  std::int64_t t0_ns = 0;
  /// The x axis runs to this time (the recording's last event).
  std::int64_t t1_ns = 0;
};

/// An <svg> element: memory by category stacked from the bottom (parameter,
/// optimizer_state, gradient, compressed, activation, unknown), cached-free on top of
/// them up to reserved, offloaded host memory mirrored below the axis, the
/// budget as a dashed line, step boundaries as dotted lines, and the peak
/// marked. samples must be in time order (downsample() them first); the
/// element carries data-* attributes for the page's hover script. Pure.
std::string render_svg_plot(const std::vector<memory_sample>& samples, const device_totals& totals,
                            const std::vector<std::int64_t>& steps_ns, const svg_plot_options& o);


}  // namespace tp::profiler
