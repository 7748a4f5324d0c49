#include "profiler/html_exporter.hpp"

#include <iterator>

#include <fmt/format.h>

#include "core/format_bytes.hpp"
#include "core/xml_escape.hpp"
#include "profiler/json_writer.hpp"
#include "profiler/svg_plot.hpp"
#include "profiler/text_report.hpp"
#include "profiler/timeline_analysis.hpp"

namespace tp::profiler {
namespace {

constexpr const char* style = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 20px 24px; color: #222; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 22px 0 8px; }
.sub { color: #555; margin-bottom: 14px; }
.warn { background: #fff3cd; border: 1px solid #e0c060; padding: 8px 12px; margin: 10px 0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 10px 0 14px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 120px; background: #fcfcfc; }
.card .v { font-size: 18px; font-weight: 600; } .card .k { font-size: 12px; color: #666; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; margin: 6px 0; font-size: 13px; }
.sw { display: inline-block; width: 12px; height: 12px; margin-right: 5px; vertical-align: -1px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.readout { font-family: monospace; font-size: 12px; min-height: 1.4em; color: #333; }
.note { color: #555; font-size: 13px; max-width: 900px; }
)";

// The hover readout: finds the sample under the cursor in the embedded data.
constexpr const char* script = R"(
(function () {
  const data = JSON.parse(document.getElementById('tp-data').textContent);
  const fmt = b => { const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB']; let i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; } return b.toFixed(i ? 2 : 0) + ' ' + u[i]; };
  document.querySelectorAll('svg.tp-plot').forEach((svg, d) => {
    const dev = data.devices[d], s = dev.series, out = document.getElementById('readout-' + d);
    const x0 = +svg.dataset.x0, x1 = +svg.dataset.x1, t0 = +svg.dataset.t0, t1 = +svg.dataset.t1;
    const cursor = svg.querySelector('line.cursor');
    svg.addEventListener('mousemove', ev => {
      const r = svg.getBoundingClientRect(), x = (ev.clientX - r.left) * svg.viewBox.baseVal.width / r.width;
      if (x < x0 || x > x1 || s.t_ns.length === 0) return;
      const t = t0 + (x - x0) / (x1 - x0) * (t1 - t0);
      let lo = 0, hi = s.t_ns.length - 1;
      while (lo < hi) { const m = (lo + hi + 1) >> 1; if (s.t_ns[m] <= t) lo = m; else hi = m - 1; }
      cursor.setAttribute('x1', x); cursor.setAttribute('x2', x); cursor.setAttribute('visibility', 'visible');
      const parts = data.categories.map(c => c + ' ' + fmt(s[c][lo]));
      out.textContent = ((s.t_ns[lo] - t0) / 1e6).toFixed(3) + ' ms: allocated ' + fmt(s.allocated[lo]) +
        ' (' + parts.join(', ') + '), reserved ' + fmt(s.reserved[lo]) + ', host ' + fmt(s.host[lo]) +
        (s.budget[lo] >= 0 ? ', budget ' + fmt(s.budget[lo]) : '');
    });
  });
})();
)";

std::string plural(std::uint64_t n, std::string_view noun) {
  return std::to_string(n) + " " + std::string(noun) + (n == 1 ? "" : "s");
}

std::string bytes(std::int64_t b) { return b < 0 ? std::string("none") : format_bytes(static_cast<std::size_t>(b)); }

void card(std::string& out, std::string_view key, const std::string& value) {
  fmt::format_to(std::back_inserter(out), "<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>\n",
                 xml_escape(value), xml_escape(key));
}

void write_data(std::string& out, const timeline& t, const timeline_analysis& a,
                const std::vector<std::vector<memory_sample>>& series) {
  std::string json;
  json_writer w(json);
  w.begin_object();
  w.member("version", 1);
  w.member("events", static_cast<std::uint64_t>(a.events));
  w.member("dropped", a.dropped);
  w.member("start_ns", a.start_ns);
  w.member("end_ns", a.end_ns);
  w.key("categories");
  w.begin_array();
  for (std::size_t c = 0; c < category_count; ++c) w.value(to_string(static_cast<category>(c)));
  w.end_array();
  w.key("steps_ns");
  w.begin_array();
  for (auto s : a.steps_ns) w.value(s);
  w.end_array();
  w.key("devices");
  w.begin_array();
  for (std::size_t d = 0; d < a.devices.size(); ++d) {
    const device_analysis& dev = a.devices[d];
    const device_totals& s = dev.totals;
    w.begin_object();
    w.member("device", static_cast<int>(dev.device));
    w.member("name", device_display_name(t, dev.device));
    w.member("peak_allocated", s.peak_allocated);
    w.member("peak_t_ns", s.peak_t_ns);
    w.member("peak_reserved", s.peak_reserved);
    w.member("peak_host", s.peak_host);
    w.member("budget", s.budget_at_peak);
    w.member("offloaded_bytes", s.offloaded_bytes);
    w.member("prefetched_bytes", s.prefetched_bytes);
    w.member("recompute_ns", s.recompute_ns);
    w.member("stall_ns", s.stall_ns);
    w.key("series");
    w.begin_object();
    auto column = [&](std::string_view name, auto get) {
      w.key(name);
      w.begin_array();
      for (const memory_sample& m : series[d]) w.value(static_cast<std::int64_t>(get(m)));
      w.end_array();
    };
    column("t_ns", [](const memory_sample& m) { return m.t_ns; });
    for (std::size_t c = 0; c < category_count; ++c) {
      column(to_string(static_cast<category>(c)), [c](const memory_sample& m) { return m.by_category[c]; });
    }
    column("allocated", [](const memory_sample& m) { return m.allocated; });
    column("reserved", [](const memory_sample& m) { return m.reserved; });
    column("host", [](const memory_sample& m) { return m.host; });
    column("budget", [](const memory_sample& m) { return m.budget; });
    w.end_object();
    w.key("top");
    w.begin_array();
    for (const live_block& b : dev.top_at_peak) {
      w.begin_object();
      w.member("bytes", b.bytes);
      w.member("requested", b.requested);
      w.member("category", to_string(b.category));
      w.member("label", t.label_text(b.label));
      w.member("t_alloc_ns", b.t_alloc_ns);
      w.member("address", b.address);
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.end_object();
  out += "<script type=\"application/json\" id=\"tp-data\">";
  out += json;  // json_quote() escapes "</", so the data cannot end the element
  out += "</script>\n";
}

void device_section(std::string& out, const timeline& t, const timeline_analysis& a, std::size_t d,
                    const std::vector<memory_sample>& series) {
  const device_analysis& dev = a.devices[d];
  const device_totals& s = dev.totals;
  fmt::format_to(std::back_inserter(out), "<h2>{}</h2>\n<div class=\"cards\">\n", xml_escape(device_display_name(t, dev.device)));
  card(out, "peak allocated", bytes(s.peak_allocated));
  card(out, "peak reserved", bytes(s.peak_reserved));
  card(out, "budget at the peak", bytes(s.budget_at_peak));
  card(out, "cached-free at peak", bytes(s.cached_free_at_peak));
  card(out, "offloaded (" + plural(s.offloads, "transfer") + ")", bytes(static_cast<std::int64_t>(s.offloaded_bytes)));
  card(out, "prefetched (" + plural(s.prefetches, "transfer") + ")", bytes(static_cast<std::int64_t>(s.prefetched_bytes)));
  card(out, "moved in total", bytes(static_cast<std::int64_t>(s.offloaded_bytes + s.prefetched_bytes)));
  card(out, fmt::format("recompute time ({})", s.recomputes), format_duration(s.recompute_ns));
  card(out, fmt::format("stall time ({})", s.stalls), format_duration(s.stall_ns));
  card(out, "out of memory", std::to_string(s.ooms));
  out += "</div>\n";
  fmt::format_to(std::back_inserter(out), "<p class=\"note\">Budget over time: {}</p>\n",
                 xml_escape(format_budgets(s.budgets, a.start_ns)));

  svg_plot_options o;
  o.t0_ns = a.start_ns;
  o.t1_ns = a.end_ns;
  out += render_svg_plot(series, s, a.steps_ns, o);
  out += "<div class=\"legend\">";
  for (category c : {category::parameter, category::optimizer_state, category::gradient, category::compressed,
                     category::activation, category::unknown}) {
    fmt::format_to(std::back_inserter(out), "<span><span class=\"sw\" style=\"background:{}\"></span>{}</span>",
                   category_colour(c), to_string(c));
  }
  fmt::format_to(std::back_inserter(out),
                 "<span><span class=\"sw\" style=\"background:{}\"></span>cached-free (reserved, not allocated)</span>"
                 "<span><span class=\"sw\" style=\"background:{}\"></span>offloaded on host (below the axis)</span>"
                 "<span><span class=\"sw\" style=\"background:{}\"></span>budget</span></div>\n",
                 cached_free_colour, host_colour, budget_colour);
  fmt::format_to(std::back_inserter(out), "<div class=\"readout\" id=\"readout-{}\">hover over the plot</div>\n", d);

  out += "<h2>At the peak, by category</h2>\n<table><tr><th>category</th><th class=\"n\">bytes</th><th class=\"n\">share</th></tr>\n";
  const double total = s.peak_allocated > 0 ? static_cast<double>(s.peak_allocated) : 1.0;
  for (std::size_t c = 0; c < category_count; ++c) {
    fmt::format_to(std::back_inserter(out),
                   "<tr><td><span class=\"sw\" style=\"background:{}\"></span>{}</td><td class=\"n\">{}</td>"
                   "<td class=\"n\">{:.1f}%</td></tr>\n",
                   category_colour(static_cast<category>(c)), to_string(static_cast<category>(c)), bytes(s.at_peak[c]),
                   100.0 * static_cast<double>(s.at_peak[c]) / total);
  }
  fmt::format_to(std::back_inserter(out), "<tr><td>cached-free</td><td class=\"n\">{}</td><td></td></tr></table>\n",
                 bytes(s.cached_free_at_peak));

  fmt::format_to(std::back_inserter(out),
                 "<h2>Largest blocks live at the peak ({} of {})</h2>\n<table><tr><th class=\"n\">#</th>"
                 "<th class=\"n\">size</th><th class=\"n\">requested</th><th>category</th><th>op or module</th>"
                 "<th class=\"n\">age at peak</th></tr>\n",
                 dev.top_at_peak.size(), dev.live_at_peak);
  std::size_t rank = 0;
  for (const live_block& b : dev.top_at_peak) {
    std::string label = t.label_text(b.label);
    if (b.origin != block_origin::allocated) label += fmt::format(" [{}]", to_string(b.origin));
    fmt::format_to(std::back_inserter(out),
                   "<tr><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td>"
                   "<td class=\"n\">{}</td></tr>\n",
                   ++rank, bytes(static_cast<std::int64_t>(b.bytes)), bytes(static_cast<std::int64_t>(b.requested)),
                   to_string(b.category), xml_escape(label.empty() ? "-" : label),
                   xml_escape(format_age(b, s.peak_t_ns)));
  }
  out += "</table>\n";
}

}  // namespace

std::string to_html(const timeline& t, const html_options& o) {
  analysis_options ao;
  ao.top_n = o.top_n;
  const timeline_analysis a = analyze(t, ao);
  std::vector<std::vector<memory_sample>> series;
  for (const device_analysis& d : a.devices) series.push_back(downsample(d.samples, o.max_points));

  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>";
  out += xml_escape(o.title);
  out += "</title>\n<style>";
  out += style;
  out += "</style>\n</head>\n<body>\n";
  fmt::format_to(std::back_inserter(out), "<h1>{}</h1>\n<div class=\"sub\">{} event{} over {}, {} step{}</div>\n",
                 xml_escape(o.title), a.events, a.events == 1 ? "" : "s", format_duration(a.end_ns - a.start_ns),
                 a.steps_ns.size(), a.steps_ns.size() == 1 ? "" : "s");
  if (a.dropped > 0) {
    fmt::format_to(std::back_inserter(out),
                   "<div class=\"warn\">The event log was full: it kept the first {} events and dropped {} later "
                   "ones, so this page ends early.</div>\n",
                   a.max_events, a.dropped);
  }
  if (a.devices.empty()) out += "<p>No memory events were recorded.</p>\n";
  for (std::size_t d = 0; d < a.devices.size(); ++d) device_section(out, t, a, d, series[d]);
  out += "<h2>How to read this page</h2>\n<p class=\"note\">Bands are stacked: allocated memory by category, then "
         "cached-free memory up to what the allocator reserved; memory offloaded to pinned host memory is drawn "
         "below the axis. <b>Categories are inferred</b>: an allocation takes the training phase it was made in "
         "(a module's forward: activation; backward: gradient; the optimizer's step: optimizer_state; otherwise "
         "unknown), and blocks that hold parameters, gradients or optimizer state are tagged as such, for their "
         "whole life, at a model's first forward and after each optimizer step; saved activations that "
         "tp.compress packed are tagged compressed. Labels name the module that was "
         "running. The same recording opens in Perfetto (.json) and in PyTorch's memory_viz (.pickle).</p>\n";
  write_data(out, t, a, series);
  out += "<script>";
  out += script;
  out += "</script>\n</body>\n</html>\n";
  return out;
}

}  // namespace tp::profiler
