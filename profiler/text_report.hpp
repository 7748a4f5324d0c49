#pragma once
// The timeline's totals and the largest blocks live at the peak, as plain
// text for logs (tp.report(), .txt files).

#include <cstddef>
#include <string>
#include <vector>

#include "profiler/timeline.hpp"
#include "profiler/timeline_analysis.hpp"

namespace tp::profiler {

/// The report of an analysis of t (analyze(t, {top_n})). Pure.
std::string to_text_report(const timeline& t, const timeline_analysis& a);
/// Analyzes t and reports it, listing top_n blocks per device. Pure.
std::string to_text_report(const timeline& t, std::size_t top_n = 20);

/// A device's display name: timeline::device_names, else "device N".
std::string device_display_name(const timeline& t, std::int16_t device);
/// "1.234 s", "12.3 ms", "45 us" for a duration in ns. Pure.
std::string format_duration(std::int64_t ns);
/// A block's age at `when`; a block live when recording began is at least
/// as old as the recording, ">= 1.200 s" (Note [What a block holds]). Pure.
std::string format_age(const live_block& b, std::int64_t when);
/// The budget over time, at most max_spans spans, times from start_ns:
/// "none", "12.00 MiB", or "none until 0.210 s; 12.00 MiB 0.210 s to 2.600 s;
/// none from 2.600 s" (Note [What a block holds]'s sibling for budgets: the
/// figure in force, never the one left after the recording). Pure.
std::string format_budgets(const std::vector<budget_span>& spans, std::int64_t start_ns, std::size_t max_spans = 6);

}  // namespace tp::profiler
