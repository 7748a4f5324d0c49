#pragma once
// The summary table tp_allocator_bench prints after Google Benchmark's
// output: one row per case, cached beside upstream, as a ratio, with the
// fast-path target and the training trace's memory figures.

#include <cstddef>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/median_timer.hpp"
#include "core/format_bytes.hpp"

namespace tp::bench {

/// The fast-path target of the issue: a cached allocate+free pair under this.
inline constexpr double fast_path_target_ns = 200.0;

/// Memory figures of the training trace, from an untimed replay that reads
/// caching_allocator::stats() after every operation.
struct trace_quality {
  std::size_t peak_allocated = 0;    // the highest allocated_bytes seen
  std::size_t reserved_at_peak = 0;  // reserved_bytes at that moment
  std::size_t peak_reserved = 0;     // reserved_bytes' own peak
  /// 1 - allocated/reserved at the moment of peak allocated bytes.
  double fragmentation() const {
    if (reserved_at_peak == 0) return 0.0;
    return 1.0 - static_cast<double>(peak_allocated) / static_cast<double>(reserved_at_peak);
  }
};

struct summary_row {
  std::string name;
  timing cached{};
  timing upstream{};
  bool fast_path = false;  // judged against fast_path_target_ns
  std::optional<trace_quality> trace{};
  /// print_expandable_table: the plain side's trace figures.
  std::optional<trace_quality> other_trace{};
};

/// "123.4 ns", "12.34 us", "1.23 ms": three significant-ish figures in a
/// fixed width whatever the magnitude.
inline std::string format_ns(double ns) {
  if (ns < 1e3) return fmt::format("{:.1f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.2f} us", ns / 1e3);
  return fmt::format("{:.2f} ms", ns / 1e6);
}

/// Prints the table and its footnotes to stdout. Not thread-safe (stdout).
/// load_before/after: the 1-minute load averages around the pass, as text.
inline void print_summary_table(const std::vector<summary_row>& rows, double pass_seconds,
                                const std::string& load_before, const std::string& load_after) {
  std::printf(
      "\ntp_allocator_bench summary: per case, median of %d batches of ~%.0f ms, taken in rounds\n",
      summary_repetitions, batch_target_ns / 1e6);
  const std::string rule(146, '-');
  std::printf("%s\n", rule.c_str());
  std::printf("%-32s %11s %11s %9s %9s | %11s %11s | %9s %14s %14s\n", "case", "cached", "upstream",
              "cached/up", "<200 ns?", "cached cpu", "upstrm cpu", "frag@peak", "peak alloc",
              "peak reserved");
  std::printf("%s\n", rule.c_str());
  for (const summary_row& r : rows) {
    const std::string target =
        r.fast_path ? (r.cached.wall_ns < fast_path_target_ns ? "met" : "MISSED") : "-";
    std::string frag = "-", alloc = "-", reserved = "-";
    if (r.trace) {
      frag = fmt::format("{:.1f} %", 100.0 * r.trace->fragmentation());
      alloc = format_bytes(r.trace->peak_allocated);
      reserved = format_bytes(r.trace->peak_reserved);
    }
    std::printf("%-32s %11s %11s %9.3f %9s | %11s %11s | %9s %14s %14s\n", r.name.c_str(),
                format_ns(r.cached.wall_ns).c_str(), format_ns(r.upstream.wall_ns).c_str(),
                r.cached.wall_ns / r.upstream.wall_ns, target.c_str(),
                format_ns(r.cached.cpu_ns).c_str(), format_ns(r.upstream.cpu_ns).c_str(),
                frag.c_str(), alloc.c_str(), reserved.c_str());
  }
  std::printf("%s\n", rule.c_str());
  std::printf(
      "cached, upstream: median wall time (steady_clock) of one allocate+free pair\n"
      "(fast path; per thread, the threads sharing one allocator), one free + one allocate\n"
      "(mixed), one whole step (training). cached/up < 1: the cache is faster.\n"
      "<200 ns?: the cached wall median against the issue's 200 ns target.\n"
      "cpu: median thread CPU time of the same batches, which leaves out time spent preempted\n"
      "by other processes, but not slowdown from other work sharing the core.\n"
      "frag@peak = 1 - allocated/reserved at the moment of peak allocated bytes (an untimed\n"
      "replay of the trace).\n"
      "Upstream = simulated_device::try_allocate/deallocate (aligned_alloc + a map insert\n"
      "under a mutex), far cheaper than cudaMalloc/cudaFree (microseconds to milliseconds,\n"
      "and cudaFree synchronizes the device): on a GPU the ratios would favour the cache far\n"
      "more.\n"
      "Summary pass took %.1f s; 1-minute load average %s before, %s after (other processes\n"
      "running meanwhile inflate the wall times, most on a machine with few cores).\n",
      pass_seconds, load_before.c_str(), load_after.c_str());
}

/// The second table: each row's `cached` side with expandable segments,
/// its `upstream` side the same workload with plain segments (today's
/// allocator), timed in the same interleaved pass. Not thread-safe (stdout).
inline void print_expandable_table(const std::vector<summary_row>& rows) {
  std::printf("\nexpandable segments beside plain segments (the cached allocator above), same pass\n");
  const std::string rule(128, '-');
  std::printf("%s\n", rule.c_str());
  std::printf("%-32s %11s %11s %9s | %11s %11s | %10s %10s %14s\n", "case", "expandable", "plain", "exp/plain",
              "exp cpu", "plain cpu", "frag exp", "frag plain", "reserved e/p");
  std::printf("%s\n", rule.c_str());
  for (const summary_row& r : rows) {
    std::string fe = "-", fp = "-", res = "-";
    if (r.trace && r.other_trace) {
      fe = fmt::format("{:.1f} %", 100.0 * r.trace->fragmentation());
      fp = fmt::format("{:.1f} %", 100.0 * r.other_trace->fragmentation());
      res = fmt::format("{}/{}", format_bytes(r.trace->peak_reserved), format_bytes(r.other_trace->peak_reserved));
    }
    std::printf("%-32s %11s %11s %9.3f | %11s %11s | %10s %10s %14s\n", r.name.c_str(),
                format_ns(r.cached.wall_ns).c_str(), format_ns(r.upstream.wall_ns).c_str(),
                r.cached.wall_ns / r.upstream.wall_ns, format_ns(r.cached.cpu_ns).c_str(),
                format_ns(r.upstream.cpu_ns).c_str(), fe.c_str(), fp.c_str(), res.c_str());
  }
  std::printf("%s\n", rule.c_str());
  std::printf(
      "exp/plain: median wall time with expandable segments over plain segments (<= 1: no slower).\n"
      "frag exp / frag plain: 1 - allocated/reserved at the moment of peak allocated bytes, each\n"
      "from its own untimed replay; reserved e/p: peak reserved bytes, expandable / plain.\n");
}

}  // namespace tp::bench
