#include "profiler/svg_plot.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>

#include <fmt/format.h>

namespace tp::profiler {
namespace {

constexpr int left_pad = 84, right_pad = 16, top_pad = 22, bottom_pad = 36;

/// Categories bottom-up: what lives longest at the bottom.
constexpr std::array<category, category_count> stack_order = {
    category::parameter, category::optimizer_state, category::gradient, category::compressed, category::activation,
    category::unknown};

/// 1, 2 or 5 times a power of ten, near range / ticks.
double nice_step(double range, int ticks) {
  if (range <= 0) return 1;
  const double raw = range / ticks;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * p) return m * p;
  }
  return 10 * p;
}

struct byte_unit {
  double scale;
  const char* name;
};
byte_unit unit_for(double max_bytes) {
  if (max_bytes >= 1024.0 * 1024 * 1024) return {1024.0 * 1024 * 1024, "GiB"};
  if (max_bytes >= 1024.0 * 1024) return {1024.0 * 1024, "MiB"};
  if (max_bytes >= 1024.0) return {1024.0, "KiB"};
  return {1.0, "B"};
}

/// Maps times and byte counts to pixels.
struct frame {
  double x0, x1, y0, y1;      // plot area in pixels (y0 top)
  double t0, t1, vmin, vmax;  // data range: ns, bytes
  double x(std::int64_t t_ns) const {
    return x0 + (static_cast<double>(t_ns) - t0) / std::max(t1 - t0, 1.0) * (x1 - x0);
  }
  double y(double v) const { return y0 + (vmax - v) / std::max(vmax - vmin, 1.0) * (y1 - y0); }
};

/// A band between two step functions of the samples, as an SVG polygon;
/// nothing when the band is empty throughout.
template <class Lower, class Upper>
void band(std::string& out, const std::vector<memory_sample>& s, const frame& f, Lower lower, Upper upper,
          const char* fill, std::string_view name) {
  bool empty = true;
  for (const auto& m : s) empty = empty && upper(m) == lower(m);
  if (empty) return;
  std::vector<std::pair<double, double>> up, lo;
  up.reserve(2 * s.size() + 1);
  lo.reserve(2 * s.size() + 1);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const double x = f.x(s[i].t_ns);
    if (i > 0) {
      up.emplace_back(x, f.y(upper(s[i - 1])));
      lo.emplace_back(x, f.y(lower(s[i - 1])));
    }
    up.emplace_back(x, f.y(upper(s[i])));
    lo.emplace_back(x, f.y(lower(s[i])));
  }
  up.emplace_back(f.x1, f.y(upper(s.back())));
  lo.emplace_back(f.x1, f.y(lower(s.back())));
  fmt::format_to(std::back_inserter(out), "<polygon class=\"band\" data-band=\"{}\" fill=\"{}\" points=\"", name, fill);
  for (const auto& [x, y] : up) fmt::format_to(std::back_inserter(out), "{:.1f},{:.1f} ", x, y);
  for (auto it = lo.rbegin(); it != lo.rend(); ++it) fmt::format_to(std::back_inserter(out), "{:.1f},{:.1f} ", it->first, it->second);
  out += "\"/>\n";
}

std::string time_label(double ns, double span_ns) {
  if (span_ns >= 10e9) return fmt::format("{:.0f} s", ns / 1e9);
  if (span_ns >= 1e9) return fmt::format("{:.1f} s", ns / 1e9);
  if (span_ns >= 1e6) return fmt::format("{:.0f} ms", ns / 1e6);
  return fmt::format("{:.0f} us", ns / 1e3);
}

}  // namespace

const char* category_colour(category c) {
  switch (c) {
    case category::parameter: return "#4e79a7";
    case category::optimizer_state: return "#af7aa1";
    case category::gradient: return "#f28e2c";
    case category::activation: return "#59a14f";
    case category::compressed: return "#76b7b2";
    case category::unknown: break;
  }
  return "#9c9c9c";
}


std::string render_svg_plot(const std::vector<memory_sample>& samples, const device_totals& totals,
                            const std::vector<std::int64_t>& steps_ns, const svg_plot_options& o) {
  std::string out;
  // The budget sets the scale only when it is near the data: a budget far
  // above the peak would flatten the plot, so it is named instead.
  const double data_max = static_cast<double>(std::max({totals.peak_reserved, totals.peak_allocated, std::int64_t{1}}));
  double budget_max = -1;
  for (const auto& b : totals.budgets) budget_max = std::max(budget_max, static_cast<double>(b.bytes));
  const bool budget_on_scale = budget_max <= data_max * 1.6;
  const double vmax = std::max(data_max, budget_on_scale ? budget_max : 0.0) * 1.06;
  const double vmin = totals.peak_host > 0 ? -static_cast<double>(totals.peak_host) * 1.15 : 0.0;
  frame f{left_pad,
          static_cast<double>(o.width - right_pad),
          top_pad,
          static_cast<double>(o.height - bottom_pad),
          static_cast<double>(o.t0_ns),
          static_cast<double>(std::max(o.t1_ns, o.t0_ns + 1)),
          vmin,
          vmax};
  fmt::format_to(std::back_inserter(out),
                 "<svg class=\"tp-plot\" width=\"{}\" height=\"{}\" "
                 "viewBox=\"0 0 {} {}\" data-x0=\"{}\" data-x1=\"{}\" data-t0=\"{}\" data-t1=\"{}\" "
                 "font-family=\"sans-serif\" font-size=\"11\">\n",
                 o.width, o.height, o.width, o.height, f.x0, f.x1, o.t0_ns, o.t1_ns);
  fmt::format_to(std::back_inserter(out), "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#ccc\"/>\n",
                 f.x0, f.y0, f.x1 - f.x0, f.y1 - f.y0);

  // Grid and axes.
  const byte_unit u = unit_for(std::max(vmax, -vmin));
  const double step = nice_step((vmax - vmin) / u.scale, 6) * u.scale;
  for (double v = std::ceil(vmin / step) * step; v <= vmax; v += step) {
    const double y = f.y(v);
    fmt::format_to(std::back_inserter(out),
                   "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e4e4e4\"/>"
                   "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"#444\">{:g} {}</text>\n",
                   f.x0, f.x1, y, y, f.x0 - 6, y + 4, std::round(std::abs(v) / u.scale * 100) / 100, u.name);
  }
  const double span = f.t1 - f.t0;
  const double tstep = nice_step(span, 8);
  for (double t = 0; t <= span; t += tstep) {
    const double x = f.x(static_cast<std::int64_t>(f.t0 + t));
    fmt::format_to(std::back_inserter(out),
                   "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#999\"/>"
                   "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" fill=\"#444\">{}</text>\n",
                   x, x, f.y1, f.y1 + 5, x, f.y1 + 18, time_label(t, span));
  }

  if (!samples.empty()) {
    // Stacked categories, then cached-free up to reserved.
    std::array<std::size_t, category_count> idx{};
    for (std::size_t k = 0; k < stack_order.size(); ++k) idx[k] = static_cast<std::size_t>(stack_order[k]);
    for (std::size_t k = 0; k < stack_order.size(); ++k) {
      auto below = [&, k](const memory_sample& s) {
        std::int64_t v = 0;
        for (std::size_t j = 0; j < k; ++j) v += s.by_category[idx[j]];
        return static_cast<double>(v);
      };
      auto above = [&, k](const memory_sample& s) { return below(s) + static_cast<double>(s.by_category[idx[k]]); };
      band(out, samples, f, below, above, category_colour(stack_order[k]), to_string(stack_order[k]));
    }
    band(
        out, samples, f, [](const memory_sample& s) { return static_cast<double>(s.allocated); },
        [](const memory_sample& s) { return static_cast<double>(std::max(s.reserved, s.allocated)); },
        cached_free_colour, "cached_free");
    if (totals.peak_host > 0) {
      band(
          out, samples, f, [](const memory_sample& s) { return -static_cast<double>(s.host); },
          [](const memory_sample&) { return 0.0; }, host_colour, "host");
    }
    // The budget, as a step line where there is one.
    std::string path;
    bool pen_down = false;
    for (std::size_t i = 0; i < samples.size(); ++i) {
      const double b = static_cast<double>(samples[i].budget);
      const std::int64_t t_end = i + 1 < samples.size() ? samples[i + 1].t_ns : o.t1_ns;
      if (samples[i].budget < 0) {
        pen_down = false;
        continue;
      }
      fmt::format_to(std::back_inserter(path), "{}{:.1f},{:.1f} L{:.1f},{:.1f} ", pen_down ? "L" : "M",
                     f.x(samples[i].t_ns), f.y(b), std::max(f.x(t_end), f.x(samples[i].t_ns)), f.y(b));
      pen_down = true;
    }
    if (!path.empty() && budget_on_scale) {
      fmt::format_to(std::back_inserter(out),
                     "<path class=\"budget\" d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
                     "stroke-dasharray=\"8 4\"/>\n",
                     path, budget_colour);
    } else if (!path.empty()) {
      fmt::format_to(std::back_inserter(out),
                     "<text class=\"budget\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"{}\">"
                     "budget {:.2f} {}: above this scale</text>\n",
                     f.x1 - 6, f.y0 + 30, budget_colour, budget_max / unit_for(budget_max).scale,
                     unit_for(budget_max).name);
    }
  }
  if (vmin < 0) {
    fmt::format_to(std::back_inserter(out), "<line x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#333\"/>\n",
                   f.x0, f.x1, f.y(0), f.y(0));
  }
  for (std::size_t i = 0; i < steps_ns.size(); ++i) {
    const double x = f.x(steps_ns[i]);
    fmt::format_to(std::back_inserter(out),
                   "<line class=\"step\" x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#555\" "
                   "stroke-dasharray=\"2 3\"/><text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#555\" text-anchor=\"end\">"
                   "step {}</text>\n",
                   x, x, f.y0, f.y1, x - 3, f.y0 + 12, i);
  }
  if (totals.peak_allocated > 0) {
    const double x = f.x(totals.peak_t_ns), y = f.y(static_cast<double>(totals.peak_allocated));
    const bool left = x > (f.x0 + f.x1) / 2;
    fmt::format_to(std::back_inserter(out),
                   "<circle class=\"peak\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"#000\"/>"
                   "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" font-weight=\"bold\">peak {:.2f} {}</text>\n",
                   x, y, x + (left ? -8 : 8), std::max(y - 6, f.y0 + 12), left ? "end" : "start",
                   static_cast<double>(totals.peak_allocated) / u.scale, u.name);
  }
  fmt::format_to(std::back_inserter(out),
                 "<line class=\"cursor\" x1=\"0\" x2=\"0\" y1=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#000\" "
                 "visibility=\"hidden\"/>\n</svg>\n",
                 f.y0, f.y1);
  return out;
}

}  // namespace tp::profiler
