#pragma once
// The timing of tp_allocator_bench's summary pass. Each row compares two
// sides (cached, upstream). Each side is a body that runs n iterations,
// calibrated once so that a batch takes about batch_target_ns. The pass runs
// summary_repetitions rounds; a round times one batch of every side of every
// row, the two sides of a row in turn first. A row's figure is the median
// batch, in time per iteration.
// Why the rounds: on a small shared machine a disturbance (another process, a
// noisy neighbour of the VM) lasts hundreds of milliseconds. Timing a row's
// 15 batches back to back lets one disturbance move the whole row; spread
// over rounds it moves one batch of each row, and the median discards it.
//
// Each batch is read on two clocks: wall time (std::chrono::steady_clock, the
// figure the table is judged on) and the calling thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID). Wall time includes time the thread spent
// preempted by other processes of this machine; CPU time does not. Neither
// removes the slowdown from other work sharing the core, its caches or, in a
// VM, the host's CPU: a quiet machine is still needed for figures to quote.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace tp::bench {

inline constexpr int summary_repetitions = 15;
inline constexpr double batch_target_ns = 10e6;

/// A time per iteration, on both clocks.
struct timing {
  double wall_ns = 0;
  double cpu_ns = 0;
};

/// CPU time consumed so far by the calling thread, in ns.
inline double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

/// Runs body(n) on the calling thread; returns its time per iteration.
/// Requires: n > 0.
template <class Body>
timing time_batch(Body& body, std::size_t n) {
  const double c0 = thread_cpu_ns();
  const auto t0 = std::chrono::steady_clock::now();
  body(n);
  const auto t1 = std::chrono::steady_clock::now();
  const double c1 = thread_cpu_ns();
  const auto wall = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  const auto per = static_cast<double>(n);
  return {static_cast<double>(wall) / per, (c1 - c0) / per};
}

/// The iteration count that makes body(n) take about batch_target_ns of wall
/// time (at least 1). Runs body a few times, doubling n from 1.
template <class Body>
std::size_t calibrate_batch(Body&& body) {
  std::size_t n = 1;
  for (;;) {
    const double t = time_batch(body, n).wall_ns * static_cast<double>(n);
    if (t >= batch_target_ns / 8 || n >= (std::size_t{1} << 30)) {
      const double scaled = static_cast<double>(n) * batch_target_ns / std::max(t, 1.0);
      return std::max<std::size_t>(1, static_cast<std::size_t>(scaled));
    }
    n *= 2;
  }
}

/// The median of xs. Requires: xs not empty.
inline double median(std::vector<double> xs) {
  const auto mid = xs.begin() + static_cast<std::ptrdiff_t>(xs.size() / 2);
  std::nth_element(xs.begin(), mid, xs.end());
  return *mid;
}

/// One batch of one side: runs the calibrated body once, returns its time
/// per iteration.
using sampler = std::function<timing()>;

/// A sampler over body, with the batch size calibrate_batch gives it now.
/// body is copied into the sampler; what it refers to must outlive it.
template <class Body>
sampler calibrated_sampler(Body body) {
  const std::size_t n = calibrate_batch(body);
  return [body, n]() mutable { return time_batch(body, n); };
}

/// The two sides of one row.
struct sampler_pair {
  sampler a;
  sampler b;
};

/// Medians of the two sides of a row; each clock's median is taken on its own.
struct median_pair {
  timing a;
  timing b;
};

/// Runs one untimed round, then summary_repetitions rounds as described at
/// the top of this file. Returns one median_pair per row, in order.
inline std::vector<median_pair> interleaved_medians(std::vector<sampler_pair>& rows) {
  struct samples {
    std::vector<double> wall, cpu;
    void add(const timing& t) {
      wall.push_back(t.wall_ns);
      cpu.push_back(t.cpu_ns);
    }
    timing medians() const { return {median(wall), median(cpu)}; }
  };
  std::vector<samples> as(rows.size()), bs(rows.size());
  for (int round = -1; round < summary_repetitions; ++round) {
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (round < 0) {
        rows[r].a();
        rows[r].b();
      } else if (round % 2 == 0) {
        as[r].add(rows[r].a());
        bs[r].add(rows[r].b());
      } else {
        bs[r].add(rows[r].b());
        as[r].add(rows[r].a());
      }
    }
  }
  std::vector<median_pair> out;
  for (std::size_t r = 0; r < rows.size(); ++r) out.push_back({as[r].medians(), bs[r].medians()});
  return out;
}

}  // namespace tp::bench
