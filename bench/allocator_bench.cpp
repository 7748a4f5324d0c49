// Over 400 lines because it is one benchmark program: each workload is a case of both passes, named once here.
// tp_allocator_bench: tp::caching_allocator over tp::simulated_device, beside
// the uncached upstream (the device's own try_allocate/deallocate) in the
// same run. Four workloads: the cached fast path per size, a mixed-size
// steady state, a training-like trace (with fragmentation at peak) and the
// fast path from several threads. A second table runs the first three with
// expandable segments beside plain segments (Note [Expandable segments] in
// caching_allocator.hpp), in the same pass. Google Benchmark's pass comes first; then a
// pass of our own (median of 15 timed batches per case) prints the summary
// table. `--summary_only` skips Google Benchmark's pass, `--no_summary` the
// summary pass (to profile one --benchmark_filter case). See bench/README.md.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "allocator/caching_allocator.hpp"
#include "bench/allocation_sources.hpp"
#include "bench/mixed_sizes.hpp"
#include "bench/summary_table.hpp"
#include "bench/trace_quality_replay.hpp"
#include "bench/training_trace.hpp"
#include "core/format_bytes.hpp"

namespace tp::bench {
namespace {

constexpr std::size_t kib = 1024;
constexpr std::size_t mib = 1024 * kib;
constexpr std::size_t gib = 1024 * mib;
constexpr std::size_t fast_path_sizes[] = {512, 4 * kib, 64 * kib, mib, 16 * mib, 256 * mib, gib};
constexpr std::size_t thread_case_bytes = kib;
constexpr int gbench_repetitions = 10;
constexpr double gbench_min_time_s = 0.1;
constexpr int trace_quality_steps = 4;

/// cached: plain segments; expandable: expandable segments; upstream: the device.
enum class via { cached, upstream, expandable };

const char* name_of(via how) {
  return how == via::cached ? "cached" : how == via::upstream ? "upstream" : "expandable";
}

/// Calls f with the Source for `how` over r (a rig made with rig(how == via::expandable)).
template <class F>
decltype(auto) with_source(rig& r, via how, F&& f) {
  if (how != via::upstream) {
    cached_source s{r.cached};
    return f(s);
  }
  upstream_source s{r.dev};
  return f(s);
}

// --- workloads, shared by both passes -----------------------------------------

template <class Source>
void alloc_free_pairs(Source& src, std::size_t bytes, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    void* p = src.allocate(bytes);
    // The const overload: with GCC 12 and -fsanitize=undefined
    // (TP_SANITIZE=address,undefined) the read-write one ("+m,r") hands a
    // pointer back changed (a 10-line repro prints nil). Reading p is all
    // that is needed to keep the pair.
    benchmark::DoNotOptimize(static_cast<const void*>(p));
    src.deallocate(p, bytes);
  }
}

const mixed_workload& the_mixed_workload() {
  static const mixed_workload w = make_mixed_workload();
  return w;
}

const training_trace& the_trace() {
  static const training_trace t = make_training_trace();
  return t;
}

const trace_quality& the_trace_quality(bool expandable) {
  static const trace_quality plain = measure_trace_quality(the_trace(), trace_quality_steps, false);
  static const trace_quality exp = measure_trace_quality(the_trace(), trace_quality_steps, true);
  return expandable ? exp : plain;
}

// --- Google Benchmark's pass ----------------------------------------------------

void bm_fast_path(benchmark::State& state, via how) {
  rig r(how == via::expandable);
  const auto bytes = static_cast<std::size_t>(state.range(0));
  with_source(r, how, [&](auto& src) {
    alloc_free_pairs(src, bytes, 1);  // warm: the cache holds a block of this size
    for (auto _ : state) alloc_free_pairs(src, bytes, 1);
  });
  state.SetLabel(format_bytes(bytes));
}

void bm_mixed(benchmark::State& state, via how) {
  rig r(how == via::expandable);
  with_source(r, how, [&](auto& src) {
    mixed_window window(the_mixed_workload(), src);
    window.steps(the_mixed_workload().sizes.size());  // warm: one full pass
    for (auto _ : state) window.steps(1);
    window.drain();
  });
}

void bm_trace(benchmark::State& state, via how) {
  rig r(how == via::expandable);
  const training_trace& t = the_trace();
  std::vector<void*> ptrs(t.slots);
  with_source(r, how, [&](auto& src) {
    replay_step(t, src, ptrs);  // warm
    for (auto _ : state) replay_step(t, src, ptrs);
  });
  if (how != via::upstream) {
    const trace_quality& q = the_trace_quality(how == via::expandable);
    state.counters["frag_at_peak_pct"] = 100.0 * q.fragmentation();
    state.counters["peak_alloc"] =
        benchmark::Counter(static_cast<double>(q.peak_allocated), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
    state.counters["peak_reserved"] =
        benchmark::Counter(static_cast<double>(q.peak_reserved), benchmark::Counter::kDefaults,
                           benchmark::Counter::kIs1024);
  }
  state.counters["allocs_per_step"] = static_cast<double>(t.allocations());
}

// Thread 0 builds and destroys the shared rig; Google Benchmark's barriers at
// the start and end of the timed loop order that against the other threads.
rig* shared_rig = nullptr;

void bm_threads(benchmark::State& state, via how) {
  if (state.thread_index() == 0) {
    shared_rig = new rig;
    with_source(*shared_rig, how, [](auto& src) { alloc_free_pairs(src, thread_case_bytes, 1); });
  }
  for (auto _ : state) {
    with_source(*shared_rig, how, [](auto& src) { alloc_free_pairs(src, thread_case_bytes, 1); });
  }
  if (state.thread_index() == 0) {
    delete shared_rig;
    shared_rig = nullptr;
  }
}

void register_gbench_cases() {
  // Every case reports the median (and mean, stddev, cv) of its repetitions.
  auto common = [](benchmark::internal::Benchmark* b) {
    return b->Repetitions(gbench_repetitions)
        ->ReportAggregatesOnly(true)
        ->MinTime(gbench_min_time_s);
  };
  for (const via how : {via::cached, via::upstream, via::expandable}) {
    const char* name = name_of(how);
    auto* fast = common(
        benchmark::RegisterBenchmark(fmt::format("fast_path/{}", name).c_str(), bm_fast_path, how));
    for (std::size_t bytes : fast_path_sizes) fast->Arg(static_cast<std::int64_t>(bytes));
    fast->ArgName("bytes");
    common(benchmark::RegisterBenchmark(fmt::format("mixed_steady_state/{}", name).c_str(),
                                        bm_mixed, how));
    common(
        benchmark::RegisterBenchmark(fmt::format("training_step/{}", name).c_str(), bm_trace, how))
        ->Unit(benchmark::kMicrosecond);
    if (how == via::expandable) continue;
    common(
        benchmark::RegisterBenchmark(fmt::format("threads_1KiB/{}", name).c_str(), bm_threads, how))
        ->Threads(1)
        ->Threads(2)
        ->UseRealTime();
  }
}

// --- the summary pass -------------------------------------------------------------
// Every row is set up first, each side on its own rig, and stays alive while
// median_timer.hpp's interleaved rounds time them all.

/// A row in the making: what it reports besides time, and its two samplers.
struct pending_row {
  summary_row row;
  sampler_pair sides;
};

pending_row fast_path_row(std::size_t bytes) {
  auto rc = std::make_shared<rig>();
  auto ru = std::make_shared<rig>();
  auto cached = [rc, bytes](std::size_t n) {
    cached_source c{rc->cached};
    alloc_free_pairs(c, bytes, n);
  };
  auto upstream = [ru, bytes](std::size_t n) {
    upstream_source u{ru->dev};
    alloc_free_pairs(u, bytes, n);
  };
  cached(1);  // warm: the cache holds a block of this size
  upstream(1);
  return {{.name = fmt::format("fast path {}", format_bytes(bytes)), .fast_path = true},
          {calibrated_sampler(cached), calibrated_sampler(upstream)}};
}

/// Both sides of the mixed workload, live from construction to destruction.
struct mixed_pair {
  rig rc, ru;
  cached_source c{rc.cached};
  upstream_source u{ru.dev};
  mixed_window<cached_source> cw{the_mixed_workload(), c};
  mixed_window<upstream_source> uw{the_mixed_workload(), u};
  mixed_pair() {
    cw.steps(the_mixed_workload().sizes.size());  // warm: one full pass
    uw.steps(the_mixed_workload().sizes.size());
  }
  ~mixed_pair() {
    cw.drain();
    uw.drain();
  }
  mixed_pair(const mixed_pair&) = delete;
  mixed_pair& operator=(const mixed_pair&) = delete;
};

pending_row mixed_row() {
  auto m = std::make_shared<mixed_pair>();
  return {{.name = "mixed 512 B..8 MiB, 64 live"},
          {calibrated_sampler([m](std::size_t n) { m->cw.steps(n); }),
           calibrated_sampler([m](std::size_t n) { m->uw.steps(n); })}};
}

pending_row trace_row() {
  const training_trace& t = the_trace();
  // (the first table: plain segments)
  auto rc = std::make_shared<rig>();
  auto ru = std::make_shared<rig>();
  auto cached = [rc, &t, ptrs = std::vector<void*>(t.slots)](std::size_t n) mutable {
    cached_source c{rc->cached};
    for (std::size_t i = 0; i < n; ++i) replay_step(t, c, ptrs);
  };
  auto upstream = [ru, &t, ptrs = std::vector<void*>(t.slots)](std::size_t n) mutable {
    upstream_source u{ru->dev};
    for (std::size_t i = 0; i < n; ++i) replay_step(t, u, ptrs);
  };
  cached(1);  // warm
  upstream(1);
  return {{.name = fmt::format("training step ({} allocs)", t.allocations()),
           .trace = the_trace_quality(false)},
          {calibrated_sampler(cached), calibrated_sampler(upstream)}};
}

// Expandable segments (side a) beside plain segments (side b), the cached
// allocator of the first table.

pending_row expandable_fast_path_row(std::size_t bytes) {
  auto re = std::make_shared<rig>(true);
  auto rp = std::make_shared<rig>(false);
  auto exp = [re, bytes](std::size_t n) {
    cached_source c{re->cached};
    alloc_free_pairs(c, bytes, n);
  };
  auto plain = [rp, bytes](std::size_t n) {
    cached_source c{rp->cached};
    alloc_free_pairs(c, bytes, n);
  };
  exp(1);  // warm
  plain(1);
  return {{.name = fmt::format("fast path {}", format_bytes(bytes)), .fast_path = true},
          {calibrated_sampler(exp), calibrated_sampler(plain)}};
}

pending_row expandable_trace_row() {
  const training_trace& t = the_trace();
  auto re = std::make_shared<rig>(true);
  auto rp = std::make_shared<rig>(false);
  auto exp = [re, &t, ptrs = std::vector<void*>(t.slots)](std::size_t n) mutable {
    cached_source c{re->cached};
    for (std::size_t i = 0; i < n; ++i) replay_step(t, c, ptrs);
  };
  auto plain = [rp, &t, ptrs = std::vector<void*>(t.slots)](std::size_t n) mutable {
    cached_source c{rp->cached};
    for (std::size_t i = 0; i < n; ++i) replay_step(t, c, ptrs);
  };
  exp(1);  // warm
  plain(1);
  return {{.name = fmt::format("training step ({} allocs)", t.allocations()),
           .trace = the_trace_quality(true),
           .other_trace = the_trace_quality(false)},
          {calibrated_sampler(exp), calibrated_sampler(plain)}};
}

/// Mean over threads of each thread's own time per pair, like Google
/// Benchmark's UseRealTime with Threads(n).
template <class Source>
timing threaded_time_per_pair(Source src, int threads, std::size_t pairs) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<timing> per_thread(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      auto body = [&](std::size_t n) { alloc_free_pairs(src, thread_case_bytes, n); };
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      per_thread[static_cast<std::size_t>(i)] = time_batch(body, pairs);
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  go.store(true, std::memory_order_release);
  for (std::thread& th : pool) th.join();
  timing mean;
  for (const timing& t : per_thread) {
    mean.wall_ns += t.wall_ns / threads;
    mean.cpu_ns += t.cpu_ns / threads;
  }
  return mean;
}

pending_row threads_row(int threads) {
  auto rc = std::make_shared<rig>();
  auto ru = std::make_shared<rig>();
  cached_source c{rc->cached};
  upstream_source u{ru->dev};
  alloc_free_pairs(c, thread_case_bytes, 1);  // warm
  alloc_free_pairs(u, thread_case_bytes, 1);
  // Batches are sized on one thread, then run on `threads` at once.
  const std::size_t nc =
      calibrate_batch([&](std::size_t n) { alloc_free_pairs(c, thread_case_bytes, n); });
  const std::size_t nu =
      calibrate_batch([&](std::size_t n) { alloc_free_pairs(u, thread_case_bytes, n); });
  return {
      {.name = fmt::format("fast path 1 KiB, {} thread{}", threads, threads == 1 ? "" : "s"),
       .fast_path = true},
      {[rc, threads, nc] { return threaded_time_per_pair(cached_source{rc->cached}, threads, nc); },
       [ru, threads, nu] {
         return threaded_time_per_pair(upstream_source{ru->dev}, threads, nu);
       }}};
}

/// The 1-minute load average from /proc/loadavg, or "?" where there is none.
std::string load_average() {
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "?";
  double one_minute = 0;
  const int got = std::fscanf(f, "%lf", &one_minute);
  std::fclose(f);
  return got == 1 ? fmt::format("{:.2f}", one_minute) : "?";
}

/// The two tables' rows: cached (plain) beside upstream, then expandable
/// beside plain. One interleaved pass times both.
std::pair<std::vector<summary_row>, std::vector<summary_row>> run_summary_pass() {
  std::vector<pending_row> pending;
  for (std::size_t bytes : fast_path_sizes) pending.push_back(fast_path_row(bytes));
  pending.push_back(threads_row(1));
  pending.push_back(threads_row(2));
  pending.push_back(mixed_row());
  pending.push_back(trace_row());
  const std::size_t first_table = pending.size();
  for (std::size_t bytes : fast_path_sizes) pending.push_back(expandable_fast_path_row(bytes));
  pending.push_back(expandable_trace_row());
  std::vector<sampler_pair> sides;
  for (pending_row& p : pending) sides.push_back(std::move(p.sides));
  const std::vector<median_pair> medians = interleaved_medians(sides);
  std::pair<std::vector<summary_row>, std::vector<summary_row>> rows;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    auto& table = i < first_table ? rows.first : rows.second;
    table.push_back(std::move(pending[i].row));
    table.back().cached = medians[i].a;
    table.back().upstream = medians[i].b;
  }
  return rows;
}

}  // namespace
}  // namespace tp::bench

int main(int argc, char** argv) {
  // Our two flags; Google Benchmark's parser would reject them.
  bool summary_only = false;
  bool no_summary = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--summary_only") == 0) {
      summary_only = true;
    } else if (std::strcmp(argv[i], "--no_summary") == 0) {
      no_summary = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  tp::bench::pin_malloc_thresholds();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!summary_only) {
    tp::bench::register_gbench_cases();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  if (no_summary) return 0;
  const std::string load_before = tp::bench::load_average();
  const auto t0 = std::chrono::steady_clock::now();
  const auto rows = tp::bench::run_summary_pass();
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  tp::bench::print_summary_table(rows.first, seconds, load_before, tp::bench::load_average());
  tp::bench::print_expandable_table(rows.second);
  return 0;
}
