// tp_profiler_bench: what recording costs.
//
//   fast_path/{off,on}/bytes:N   one allocate + free of N bytes on a warm
//                                caching allocator, with no trace, or with an
//                                event log's allocator_recorder attached on
//                                the production event clock
//                                (make_event_clock()).
//   append/writer                one event into a single-producer writer.
//   append/record                one event through event_log::record() (the
//                                runtime's entry point: mutex + clock).
//
// After Google Benchmark's pass the binary prints a summary (Note [Paired
// batches]): for each size, the recorded fast path over the unrecorded one
// as a ratio, and beside it the same pair plus two reads of the cycle
// counter and nothing else, which is the floor any design that stamps every
// event with the counter pays; then events per second for each append path.
// --summary_only skips Google Benchmark's pass; --no_summary skips the
// summary (for a profiler, with --benchmark_filter). A log that fills up is
// replaced outside the timed region, so every timed event is stored (none
// dropped). TP_BENCH_SPARE_CHUNKS=N runs the logs with N spare chunks (Note
// [Chunk memory]).
//
// Note [Paired batches]
// On the 2-vCPU VM this was written on, the same unrecorded pair costs
// 140 ns in one process and 290 ns in the next, and drifts within a run, so
// two allocators (one recording, one not) or two runs compare noise. The
// summary therefore uses one allocator per size and attaches the recorder
// for some batches and detaches it for others; the sides take turns in
// rounds of short batches (4000 pairs, about 0.6 ms), each round's ratio is
// taken between neighbouring batches, and the table reports the median of
// 101 such ratios beside the median times. The times are the allocating
// thread's CPU time (CLOCK_THREAD_CPUTIME_ID): what the caller pays.

#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "core/cycle_counter.hpp"
#include "device/simulated_device.hpp"
#include "profiler/allocator_recorder.hpp"
#include "profiler/event_log.hpp"
#include "profiler/tsc_clock.hpp"

namespace {

using namespace tp;
using namespace tp::profiler;

/// An allocator whose recording can be switched on and off between batches,
/// into a log that is renewed when it fills.
class rig {
 public:
  rig() : dev_(device_options(), device_clock_), alloc_(dev_) {
    void* warm = alloc_.allocate(1 << 28);  // one large segment, so later pairs hit the cache
    alloc_.deallocate(warm);
  }
  ~rig() { alloc_.set_log(nullptr); }

  /// Call outside timed regions: starts recording, into a fresh log when
  /// fewer than `room` events are left.
  void record(std::size_t room) {
    if (!log_ || log_->max_events() - log_->size() < room) renew();
    alloc_.set_log(recorder_);
  }
  /// Call outside timed regions: stops recording.
  void stop() { alloc_.set_log(nullptr); }

  void pair(std::size_t bytes) {
    void* p = alloc_.allocate(bytes);
    benchmark::DoNotOptimize(p);
    alloc_.deallocate(p);
  }
  /// Events recorded so far, over every log this rig has had.
  std::size_t events() const { return log_ ? retired_events_ + log_->size() + log_->dropped() : 0; }
  std::uint64_t dropped() const { return log_ ? log_->dropped() : 0; }

 private:
  static simulated_device::options device_options() {
    simulated_device::options o;
    o.capacity_bytes = std::size_t{4} << 30;
    return o;
  }
  void renew() {
    alloc_.set_log(nullptr);
    if (log_) retired_events_ += log_->size() + log_->dropped();
    event_log::options o;
    if (const char* spares = std::getenv("TP_BENCH_SPARE_CHUNKS")) o.spare_chunks = std::strtoull(spares, nullptr, 10);
    log_ = std::make_unique<event_log>(*event_clock_, o);
    recorder_ = &log_->open_allocator_recorder(0);
  }

  manual_clock device_clock_;
  simulated_device dev_;
  caching_allocator alloc_;
  std::unique_ptr<tp::clock> event_clock_ = make_event_clock();
  std::unique_ptr<event_log> log_;
  allocator_recorder* recorder_ = nullptr;  // owned by log_
  std::size_t retired_events_ = 0;
};

void fast_path(benchmark::State& state, bool recording) {
  rig r;
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    if (recording) r.record(1 << 16);
    state.ResumeTiming();
    for (int i = 0; i < 1024; ++i) r.pair(bytes);
  }
  state.SetItemsProcessed(state.iterations() * 1024);
  state.counters["dropped"] = static_cast<double>(r.dropped());
}
BENCHMARK_CAPTURE(fast_path, off, false)->Arg(512)->Arg(64 << 10)->Arg(4 << 20);
BENCHMARK_CAPTURE(fast_path, on, true)->Arg(512)->Arg(64 << 10)->Arg(4 << 20);

void append_writer(benchmark::State& state) {
  auto clk = make_event_clock();
  auto log = std::make_unique<event_log>(*clk);
  event_log::writer* w = &log->open_writer();
  event e;
  for (auto _ : state) {
    if (log->size() + 1024 > log->max_events()) {
      state.PauseTiming();
      log = std::make_unique<event_log>(*clk);
      w = &log->open_writer();
      state.ResumeTiming();
    }
    for (int i = 0; i < 1024; ++i) {
      e.t_ns = log->now_ns();
      w->append(e);
    }
  }
  state.SetItemsProcessed(state.iterations() * 1024);
}
BENCHMARK(append_writer)->Name("append/writer");

void append_record(benchmark::State& state) {
  auto clk = make_event_clock();
  auto log = std::make_unique<event_log>(*clk);
  event e;
  for (auto _ : state) {
    if (log->size() + 1024 > log->max_events()) {
      state.PauseTiming();
      log = std::make_unique<event_log>(*clk);
      state.ResumeTiming();
    }
    for (int i = 0; i < 1024; ++i) log->record(e);
  }
  state.SetItemsProcessed(state.iterations() * 1024);
}
BENCHMARK(append_record)->Name("append/record");

// --- the summary: Note [Paired batches] ------------------------------------------

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct side {
  std::function<void(std::size_t)> prepare;  // untimed, before each batch (may be empty)
  std::function<void(std::size_t)> body;     // timed: n iterations
};

/// Per side, CPU ns per iteration of each of `rounds` batches of n, the
/// sides taking turns (who goes first rotates).
std::vector<std::vector<double>> alternate(const std::vector<side>& sides, std::size_t n, int rounds) {
  std::vector<std::vector<double>> cpu(sides.size());
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t b = 0; b < sides.size(); ++b) {
      const std::size_t k = (b + static_cast<std::size_t>(r)) % sides.size();
      if (sides[k].prepare) sides[k].prepare(n);
      const double c0 = thread_cpu_ns();
      sides[k].body(n);
      cpu[k].push_back((thread_cpu_ns() - c0) / static_cast<double>(n));
    }
  }
  return cpu;
}

/// The median over rounds of side a's time over side b's.
double paired_ratio(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.size(); ++i) r.push_back(a[i] / b[i]);
  return median(r);
}

void summary() {
  constexpr std::size_t n = 4000;
  constexpr int rounds = 101;
  std::printf("\ntp_profiler_bench summary: %d rounds of %zu-pair batches per side, one allocator per row;\n"
              "thread CPU ns per allocate+free (median batch), and ratios to `off` (median of per-round ratios).\n"
              "event clock: %s. `counter only`: the unrecorded pair plus two cycle-counter reads, nothing stored.\n",
              rounds, n, tsc_clock::available() ? "tsc_clock" : "steady_clock");
  std::printf("%-16s %8s %8s %8s %13s %12s %12s\n", "allocate+free", "off ns", "on ns", "on/off", "counter only",
              "counter/off", "events/pair");
  for (std::size_t bytes : {std::size_t{512}, std::size_t{64} << 10, std::size_t{4} << 20}) {
    rig r;
    const auto pairs = [&](std::size_t k) {
      for (std::size_t i = 0; i < k; ++i) r.pair(bytes);
    };
    const auto pairs_and_counter = [&](std::size_t k) {
      for (std::size_t i = 0; i < k; ++i) {
        benchmark::DoNotOptimize(read_cycle_counter());
        r.pair(bytes);
        benchmark::DoNotOptimize(read_cycle_counter());
      }
    };
    const auto stop = [&](std::size_t) { r.stop(); };
    r.record(0);
    const std::size_t before = r.events();
    const auto t = alternate({{stop, pairs}, {[&](std::size_t k) { r.record(3 * k); }, pairs}, {stop, pairs_and_counter}},
                             n, rounds);
    r.stop();
    const double per_pair = static_cast<double>(r.events() - before) / (rounds * static_cast<double>(n));
    std::printf("%-16s %8.1f %8.1f %8.3f %13.1f %12.3f %12.1f\n", ("bytes:" + std::to_string(bytes)).c_str(),
                median(t[0]), median(t[1]), paired_ratio(t[1], t[0]), median(t[2]), paired_ratio(t[2], t[0]),
                per_pair);
  }
  auto clk = make_event_clock();
  std::unique_ptr<event_log> log;
  event_log::writer* w = nullptr;
  auto fresh = [&] {
    log = std::make_unique<event_log>(*clk);
    w = &log->open_writer();
  };
  fresh();
  event e;
  auto room = [&](std::size_t k) {
    if (log->size() + 2 * k > log->max_events()) fresh();
  };
  const auto t = alternate({{room,
                             [&](std::size_t k) {
                               for (std::size_t i = 0; i < k; ++i) {
                                 e.t_ns = log->now_ns();
                                 w->append(e);
                               }
                             }},
                            {room, [&](std::size_t k) { for (std::size_t i = 0; i < k; ++i) log->record(e); }}},
                           20000, 21);
  std::printf("\n%-26s %9s %12s\n", "append one event", "cpu ns", "events/s");
  std::printf("%-26s %9.1f %12.3g\n", "writer (clock + store)", median(t[0]), 1e9 / median(t[0]));
  std::printf("%-26s %9.1f %12.3g\n", "record() (mutex + clock)", median(t[1]), 1e9 / median(t[1]));
}

}  // namespace

int main(int argc, char** argv) {
  bool summary_only = false, no_summary = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--summary_only") == 0) {
      summary_only = true;
    } else if (std::strcmp(argv[i], "--no_summary") == 0) {
      no_summary = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  if (!summary_only) {
    benchmark::Initialize(&n, args.data());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  }
  if (!no_summary) summary();
  return 0;
}
