#pragma once
// The timeline's totals and the largest blocks live at the peak, as plain
// text for logs (tp.report(), .txt files).

#include <cstddef>
#include <string>

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

}  // namespace tp::profiler
