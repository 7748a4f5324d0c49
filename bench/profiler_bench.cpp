// tp_profiler_bench: what recording costs.
//
//   fast_path/{off,on}/bytes:N   one allocate + free of N bytes on a warm
//                                caching allocator, with no observer, or with
//                                an allocator_recorder on the production
//                                event clock (make_event_clock()).
//   append/writer                one event into a single-producer writer.
//   append/record                one event through event_log::record() (the
//                                runtime's entry point: mutex + clock).
//
// After Google Benchmark's pass the binary prints a summary: each row runs
// `off` and `on` in alternating batches of about 10 ms, 21 rounds, and
// reports the median time per pair and the ratio on/off; then events per
// second for each append path. --summary_only skips Google Benchmark's pass;
// --no_summary skips the summary (for a profiler, with --benchmark_filter).
// A log that fills up is replaced outside the timed region, so every timed
// event is stored (none dropped). The "cpu" columns count the allocating
// thread's CPU time; "wall" adds the time it was not running: on a loaded
// machine, waits for a core, and in a VM apparently also the host's first
// touch of fresh guest memory, which only the recording side consumes.
// TP_BENCH_SPARE_CHUNKS=N runs the logs with N spare chunks (Note [Chunk
// memory]).

#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "device/simulated_device.hpp"
#include "profiler/allocator_recorder.hpp"
#include "profiler/event_log.hpp"
#include "profiler/tsc_clock.hpp"

namespace {

using namespace tp;
using namespace tp::profiler;

/// The production event clock, or with TP_BENCH_CLOCK=manual a manual_clock
/// (an atomic load): the difference is what reading the time costs.
std::unique_ptr<tp::clock> bench_event_clock() {
  const char* which = std::getenv("TP_BENCH_CLOCK");
  if (which != nullptr && std::strcmp(which, "manual") == 0) return std::make_unique<manual_clock>();
  return make_event_clock();
}

/// An allocator with an optional recorder that is renewed when its log fills.
class rig {
 public:
  explicit rig(bool recording) : dev_(device_options(), device_clock_), alloc_(dev_), recording_(recording) {
    renew();
    void* warm = alloc_.allocate(1 << 28);  // one large segment, so later pairs hit the cache
    alloc_.deallocate(warm);
  }
  ~rig() { alloc_.set_observer(nullptr); }

  /// Call outside timed regions: replaces the log when fewer than `room` events are left.
  void ensure_room(std::size_t room) {
    if (recording_ && log_->max_events() - log_->size() < room) renew();
  }
  void pair(std::size_t bytes) {
    void* p = alloc_.allocate(bytes);
    benchmark::DoNotOptimize(p);
    alloc_.deallocate(p);
  }
  /// Events recorded so far, over every log this rig has had.
  std::size_t events() const { return recording_ ? retired_events_ + log_->size() + log_->dropped() : 0; }
  std::uint64_t dropped() const { return recording_ ? log_->dropped() : 0; }

 private:
  static simulated_device::options device_options() {
    simulated_device::options o;
    o.capacity_bytes = std::size_t{4} << 30;
    return o;
  }
  void renew() {
    if (!recording_) return;
    alloc_.set_observer(nullptr);
    recorder_.reset();
    if (log_) retired_events_ += log_->size() + log_->dropped();
    event_log::options o;
    if (const char* spares = std::getenv("TP_BENCH_SPARE_CHUNKS")) o.spare_chunks = std::strtoull(spares, nullptr, 10);
    log_ = std::make_unique<event_log>(*event_clock_, o);
    recorder_ = std::make_unique<allocator_recorder>(*log_, 0);
    alloc_.set_observer(recorder_.get());
  }

  manual_clock device_clock_;
  simulated_device dev_;
  caching_allocator alloc_;
  bool recording_;
  std::unique_ptr<tp::clock> event_clock_ = bench_event_clock();
  std::unique_ptr<event_log> log_;
  std::unique_ptr<allocator_recorder> recorder_;
  std::size_t retired_events_ = 0;
};

void fast_path(benchmark::State& state, bool recording) {
  rig r(recording);
  const auto bytes = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    r.ensure_room(1 << 16);
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

// --- the summary ----------------------------------------------------------------

double now_ns() {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct timing {
  double wall_ns, cpu_ns;  // per iteration: wall time, and the calling thread's CPU time
};

struct side {
  std::function<void(std::size_t)> prepare;  // untimed, before each batch (may be empty)
  std::function<void(std::size_t)> body;     // timed: n iterations
};

/// Median time per iteration of each side over `rounds` rounds of
/// alternating batches of n iterations.
std::vector<timing> alternate(const std::vector<side>& sides, std::size_t n, int rounds) {
  std::vector<std::vector<double>> wall(sides.size()), cpu(sides.size());
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t b = 0; b < sides.size(); ++b) {
      const std::size_t k = (b + static_cast<std::size_t>(r)) % sides.size();  // vary who goes first
      if (sides[k].prepare) sides[k].prepare(n);
      const double c0 = thread_cpu_ns(), t0 = now_ns();
      sides[k].body(n);
      const double t1 = now_ns(), c1 = thread_cpu_ns();
      wall[k].push_back((t1 - t0) / static_cast<double>(n));
      cpu[k].push_back((c1 - c0) / static_cast<double>(n));
    }
  }
  std::vector<timing> out;
  for (std::size_t b = 0; b < sides.size(); ++b) out.push_back({median(wall[b]), median(cpu[b])});
  return out;
}

void summary() {
  std::printf("\ntp_profiler_bench summary: median of 21 alternating batches of 20000; event clock: %s\n"
              "(cpu: the allocating thread's CPU time; wall: elapsed time, which on a loaded machine also\n"
              " counts time the thread waited for a core)\n",
              tsc_clock::available() ? "tsc_clock" : "steady_clock");
  std::printf("%-16s %9s %9s %9s %9s %9s %9s %12s\n", "allocate+free", "off cpu", "on cpu", "on/off", "off wall",
              "on wall", "on/off", "events/pair");
  for (std::size_t bytes : {std::size_t{512}, std::size_t{64} << 10, std::size_t{4} << 20}) {
    rig off(false), on(true);
    constexpr std::size_t n = 20000;
    const std::size_t before = on.events();
    const auto t = alternate({{nullptr, [&](std::size_t k) { for (std::size_t i = 0; i < k; ++i) off.pair(bytes); }},
                              {[&](std::size_t k) { on.ensure_room(3 * k); },
                               [&](std::size_t k) { for (std::size_t i = 0; i < k; ++i) on.pair(bytes); }}},
                             n, 21);
    const double per_pair = static_cast<double>(on.events() - before) / (21.0 * n);
    std::printf("%-16s %9.1f %9.1f %9.3f %9.1f %9.1f %9.3f %12.1f\n", ("bytes:" + std::to_string(bytes)).c_str(),
                t[0].cpu_ns, t[1].cpu_ns, t[1].cpu_ns / t[0].cpu_ns, t[0].wall_ns, t[1].wall_ns,
                t[1].wall_ns / t[0].wall_ns, per_pair);
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
  std::printf("%-26s %9.1f %12.3g\n", "writer (clock + store)", t[0].cpu_ns, 1e9 / t[0].cpu_ns);
  std::printf("%-26s %9.1f %12.3g\n", "record() (mutex + clock)", t[1].cpu_ns, 1e9 / t[1].cpu_ns);
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
