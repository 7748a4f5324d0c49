#pragma once
// A self-contained HTML page for a timeline: opens in any browser, fetches
// nothing.
//
// Note [Self-contained page]
// The page has no external URL at all: no script, style, font or image
// source, and no link. Styles and the hover script are inline; the plot is
// inline SVG drawn here (svg_plot.hpp), so it shows with scripts disabled
// (HTML5 needs no xmlns for inline SVG, so not even a namespace URI appears).
// The data behind the page is embedded as JSON in
// <script type="application/json" id="tp-data"> (a data block, never
// executed): per device the downsampled series, the peak, the totals and
// the top blocks; tests read it to check the plot against the recording.

#include <cstddef>
#include <string>

#include "profiler/timeline.hpp"

namespace tp::profiler {

struct html_options {
  /// Rows in the table of the largest blocks live at the peak.
  std::size_t top_n = 20;
  /// The most samples plotted per device (downsample() keeps the peak).
  std::size_t max_points = 3000;
  std::string title = "tensorpager memory timeline";
};

/// The page for t. Pure; throws std::bad_alloc.
std::string to_html(const timeline& t, const html_options& o = {});

}  // namespace tp::profiler
