#include "profiler/text_report.hpp"

#include <algorithm>
#include <iterator>

#include <fmt/format.h>

#include "core/format_bytes.hpp"

namespace tp::profiler {
namespace {

std::string bytes(std::int64_t b) { return b < 0 ? std::string("-") : format_bytes(static_cast<std::size_t>(b)); }

/// "1 transfer", "2 transfers".
std::string count(std::uint64_t n, std::string_view noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

void device_section(std::string& out, const timeline& t, const timeline_analysis& a, const device_analysis& d) {
  const device_totals& s = d.totals;
  auto line = [&](std::string_view what, const std::string& value) {
    fmt::format_to(std::back_inserter(out), "  {:<22}{}\n", what, value);
  };
  fmt::format_to(std::back_inserter(out), "\n{}\n", device_display_name(t, d.device));
  line("peak allocated", fmt::format("{} at {}", bytes(s.peak_allocated), format_duration(s.peak_t_ns - a.start_ns)));
  line("peak reserved", bytes(s.peak_reserved));
  line("cached-free at peak", bytes(s.cached_free_at_peak));
  line("budget", format_budgets(s.budgets, a.start_ns));
  line("budget at the peak", s.budget_at_peak < 0 ? std::string("none") : bytes(s.budget_at_peak));
  line("offloaded to host", fmt::format("{} in {} ({})", bytes(static_cast<std::int64_t>(s.offloaded_bytes)),
                                        count(s.offloads, "transfer"), format_duration(s.offload_ns)));
  line("prefetched", fmt::format("{} in {} ({})", bytes(static_cast<std::int64_t>(s.prefetched_bytes)),
                                 count(s.prefetches, "transfer"), format_duration(s.prefetch_ns)));
  line("peak on host", bytes(s.peak_host));
  line("recomputed", fmt::format("{} in {} ({})", bytes(static_cast<std::int64_t>(s.recomputed_bytes)),
                                 count(s.recomputes, "recomputation"), format_duration(s.recompute_ns)));
  line("stalls", fmt::format("{} ({})", s.stalls, format_duration(s.stall_ns)));
  line("evictions", fmt::format("{} ({} dropped for recompute)", s.evictions, s.dropped_evictions));
  line("reclaims", fmt::format("{} (freed {})", s.reclaims, bytes(static_cast<std::int64_t>(s.reclaimed_bytes))));
  line("out of memory", fmt::format("{}", s.ooms));
  line("device syncs", fmt::format("{} (to give memory back)", s.device_syncs));
  line("allocations", fmt::format("{} ({} mapped, {} unmapped)", s.allocs, count(s.segment_allocs, "segment"),
                                  s.segment_frees));

  out += "\n  at the peak, by category (inferred: see docs/timelines.md):\n";
  const double total = s.peak_allocated > 0 ? static_cast<double>(s.peak_allocated) : 1.0;
  for (std::size_t c = 0; c < category_count; ++c) {
    fmt::format_to(std::back_inserter(out), "    {:<18}{:>12} {:>6.1f}%\n", to_string(static_cast<category>(c)),
                   bytes(s.at_peak[c]), 100.0 * static_cast<double>(s.at_peak[c]) / total);
  }
  fmt::format_to(std::back_inserter(out), "    {:<18}{:>12}\n", "cached-free", bytes(s.cached_free_at_peak));

  fmt::format_to(std::back_inserter(out), "\n  largest blocks live at the peak ({} of {}):\n", d.top_at_peak.size(),
                 d.live_at_peak);
  if (d.top_at_peak.empty()) return;
  fmt::format_to(std::back_inserter(out), "    {:>3}  {:>11}  {:>11}  {:<16} {:>10}  {}\n", "#", "size", "requested",
                 "category", "age", "label");
  std::size_t rank = 0;
  for (const live_block& b : d.top_at_peak) {
    std::string label = t.label_text(b.label);
    if (label.empty()) label = "-";
    if (b.origin != block_origin::allocated) label += fmt::format(" [{}]", to_string(b.origin));
    fmt::format_to(std::back_inserter(out), "    {:>3}  {:>11}  {:>11}  {:<16} {:>10}  {}\n", ++rank,
                   bytes(static_cast<std::int64_t>(b.bytes)), bytes(static_cast<std::int64_t>(b.requested)),
                   to_string(b.category), format_age(b, s.peak_t_ns), label);
  }
}

}  // namespace

std::string device_display_name(const timeline& t, std::int16_t device) {
  const auto i = static_cast<std::size_t>(device);
  if (device >= 0 && i < t.device_names.size() && !t.device_names[i].empty()) return t.device_names[i];
  return "device " + std::to_string(device);
}

std::string format_duration(std::int64_t ns) {
  const double v = static_cast<double>(ns);
  if (ns < 0) return "-" + format_duration(-ns);
  if (ns >= 1'000'000'000) return fmt::format("{:.3f} s", v / 1e9);
  if (ns >= 1'000'000) return fmt::format("{:.1f} ms", v / 1e6);
  if (ns >= 1'000) return fmt::format("{:.1f} us", v / 1e3);
  return fmt::format("{} ns", ns);
}

std::string format_age(const live_block& b, std::int64_t when) {
  const std::string age = format_duration(when - b.t_alloc_ns);
  return b.before_recording ? ">= " + age : age;
}

std::string format_budgets(const std::vector<budget_span>& spans, std::int64_t start_ns, std::size_t max_spans) {
  auto value = [](std::int64_t b) { return b < 0 ? std::string("none") : bytes(b); };
  if (spans.empty()) return "none";
  if (spans.size() == 1) return value(spans.front().bytes);
  std::string out;
  const std::size_t shown = std::min(spans.size(), std::max<std::size_t>(max_spans, 2));
  for (std::size_t i = 0; i < shown; ++i) {
    const budget_span& s = spans[i];
    if (i > 0) out += "; ";
    if (i == 0) {
      out += fmt::format("{} until {}", value(s.bytes), format_duration(s.to_ns - start_ns));
    } else if (i + 1 == spans.size()) {
      out += fmt::format("{} from {}", value(s.bytes), format_duration(s.from_ns - start_ns));
    } else {
      out += fmt::format("{} {} to {}", value(s.bytes), format_duration(s.from_ns - start_ns),
                         format_duration(s.to_ns - start_ns));
    }
  }
  if (shown < spans.size()) out += fmt::format("; ... ({} changes in all)", spans.size() - 1);
  return out;
}

std::string to_text_report(const timeline& t, const timeline_analysis& a) {
  std::string out = "tensorpager memory timeline\n";
  fmt::format_to(std::back_inserter(out), "  {} over {}, {}\n", count(a.events, "event"),
                 format_duration(a.end_ns - a.start_ns), count(a.steps_ns.size(), "step"));
  if (a.dropped > 0) {
    fmt::format_to(std::back_inserter(out),
                   "  WARNING: the log was full: {} later events were dropped (it keeps the first {}); "
                   "raise the cap or restart recording\n",
                   a.dropped, a.max_events);
  }
  if (a.devices.empty()) out += "  (no memory events recorded)\n";
  for (const device_analysis& d : a.devices) device_section(out, t, a, d);
  return out;
}

std::string to_text_report(const timeline& t, std::size_t top_n) {
  analysis_options o;
  o.top_n = top_n;
  return to_text_report(t, analyze(t, o));
}

}  // namespace tp::profiler
