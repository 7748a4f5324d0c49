#include "sim/slowdown_svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/xml_escape.hpp"

namespace tp::sim {
namespace {

constexpr int width = 720, height = 440;
constexpr int left = 70, right = 160, top = 50, bottom = 60;
constexpr const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"};


}  // namespace

std::string render_slowdown_svg(const sweep_result& s, const std::string& title) {
  double y_max = 1.0;
  for (const auto& row : s.points) {
    for (const sweep_point& pt : row) {
      if (pt.report.fits) y_max = std::max(y_max, pt.report.slowdown);
    }
  }
  y_max = std::ceil(y_max * 4.0) / 4.0 + 0.25;  // headroom, in quarter steps
  const double r_hi = s.ratios.empty() ? 1.0 : *std::max_element(s.ratios.begin(), s.ratios.end());
  const double r_lo = s.ratios.empty() ? 0.0 : *std::min_element(s.ratios.begin(), s.ratios.end());
  const double span = r_hi > r_lo ? r_hi - r_lo : 1.0;
  const int plot_w = width - left - right, plot_h = height - top - bottom;
  auto x_of = [&](double ratio) { return left + (r_hi - ratio) / span * plot_w; };
  auto y_of = [&](double slowdown) { return top + plot_h - (slowdown - 1.0) / (y_max - 1.0) * plot_h; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height, width, height);
  svg += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"15\">{}</text>\n", left, xml_escape(title));
  // Axes, grid and tick labels.
  const int ticks = 5;
  for (int i = 0; i <= ticks; ++i) {
    const double v = 1.0 + (y_max - 1.0) * i / ticks;
    const double y = y_of(v);
    svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\"/>\n", left, y,
                       left + plot_w, y);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.2f}x</text>\n", left - 6, y + 4, v);
  }
  for (double ratio : s.ratios) {
    const double x = x_of(ratio);
    svg += fmt::format("<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#f0f0f0\"/>\n", x, top, x,
                       top + plot_h);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:.1f}</text>\n", x, top + plot_h + 18,
                       ratio);
  }
  svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#444\"/>\n", left,
                     top, plot_w, plot_h);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">budget / unconstrained peak reserved</text>\n",
                     left + plot_w / 2, height - 16);
  svg += fmt::format("<text x=\"18\" y=\"{}\" transform=\"rotate(-90 18 {})\" text-anchor=\"middle\">slowdown "
                     "(step time / unconstrained)</text>\n", top + plot_h / 2, top + plot_h / 2);
  // One polyline per policy, crosses where it does not fit.
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    const char* colour = colours[p % std::size(colours)];
    std::string pts;
    for (const sweep_point& pt : s.points[p]) {
      const double x = x_of(pt.ratio);
      if (pt.report.fits) {
        const double y = y_of(pt.report.slowdown);
        pts += fmt::format("{:.1f},{:.1f} ", x, y);
        svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"><title>{} {:.1f}: {:.3f}x</title>"
                           "</circle>\n", x, y, colour, to_string(s.policies[p]), pt.ratio, pt.report.slowdown);
      } else {
        const double y = top + 6.0 + 7.0 * static_cast<double>(p);
        svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"{}\" text-anchor=\"middle\">x<title>{} {:.1f}: "
                           "does not fit</title></text>\n", x, y + 4, colour, to_string(s.policies[p]), pt.ratio);
      }
    }
    if (!pts.empty()) {
      svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", pts, colour);
    }
    const int ly = top + 20 + 22 * static_cast<int>(p);
    svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"/>\n",
                       left + plot_w + 16, ly, left + plot_w + 40, ly, colour);
    svg += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", left + plot_w + 46, ly + 4, to_string(s.policies[p]));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#666\">x: does not fit</text>\n", left + plot_w + 16,
                     top + 20 + 22 * static_cast<int>(s.points.size()) + 8);
  svg += "</svg>\n";
  return svg;
}

}  // namespace tp::sim
