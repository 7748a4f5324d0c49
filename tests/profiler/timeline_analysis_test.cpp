// The replay behind the page and the report: categories add up to the
// allocator's total after every event, tags re-label blocks, the peak and
// what was live at it, runtime totals, and downsampling that keeps the peak.
// A randomised run checks the invariants against the allocator's statistics.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "profiler/text_report.hpp"
#include "profiler/timeline_analysis.hpp"
#include "profiler_test_support.hpp"

namespace tp::profiler {
namespace {

using namespace tp::profiler::testing;

std::int64_t sum(const memory_sample& s) {
  return std::accumulate(s.by_category.begin(), s.by_category.end(), std::int64_t{0});
}

TEST(TimelineAnalysis, CategoriesFollowTheContextAndTags) {
  recorded_rig rig;
  event_log& log = rig.log;
  log.set_context({category::parameter, log.intern("model (Linear)")});
  void* weight = rig.alloc.allocate(8 * MiB);
  rig.tick();
  log.set_context({category::activation, log.intern("relu (ReLU)")});
  void* act = rig.alloc.allocate(2 * MiB);
  void* grad = rig.alloc.allocate(8 * MiB);  // made in the forward phase, really a gradient
  rig.tick();
  event tag;
  tag.kind = event_kind::tag;
  tag.address = reinterpret_cast<std::uintptr_t>(grad);
  tag.category = category::gradient;
  log.record(tag);
  rig.tick();
  rig.alloc.deallocate(act);
  rig.tick();

  const timeline_analysis a = analyze(log.snapshot());
  ASSERT_EQ(a.devices.size(), 1u);
  const device_analysis& d = a.devices[0];
  for (const memory_sample& s : d.samples) EXPECT_EQ(sum(s), s.allocated);
  const memory_sample& last = d.samples.back();
  EXPECT_EQ(last.by_category[static_cast<std::size_t>(category::parameter)], static_cast<std::int64_t>(8 * MiB));
  EXPECT_EQ(last.by_category[static_cast<std::size_t>(category::gradient)], static_cast<std::int64_t>(8 * MiB));
  EXPECT_EQ(last.by_category[static_cast<std::size_t>(category::activation)], 0);
  EXPECT_EQ(d.totals.peak_allocated, static_cast<std::int64_t>(18 * MiB));
  // A tag is true of the block's whole life, so at the peak (before the tag)
  // the block already counts as a gradient.
  EXPECT_EQ(d.totals.at_peak[static_cast<std::size_t>(category::activation)], static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(d.totals.at_peak[static_cast<std::size_t>(category::gradient)], static_cast<std::int64_t>(8 * MiB));
  ASSERT_EQ(d.top_at_peak.size(), 3u);
  EXPECT_EQ(d.top_at_peak[0].bytes, 8 * MiB);
  EXPECT_EQ(d.top_at_peak[2].bytes, 2 * MiB);
  EXPECT_EQ(log.snapshot().label_text(d.top_at_peak[2].label), "relu (ReLU)");
  rig.alloc.deallocate(weight);
  rig.alloc.deallocate(grad);
}

TEST(TimelineAnalysis, BlocksAllocatedBeforeRecordingAreUnknownButCounted) {
  recorded_rig rig;
  rig.alloc.set_log(nullptr);
  void* early = rig.alloc.allocate(4 * MiB);
  event_log log(rig.clk);
  log.add_initial(initial_device_state{0, rig.alloc.snapshot(), -1});
  rig.alloc.set_log(&log.open_allocator_recorder(0));
  log.set_context({category::activation, 0});
  void* late = rig.alloc.allocate(1 * MiB);
  rig.alloc.deallocate(early);
  rig.alloc.set_log(nullptr);
  const timeline_analysis a = analyze(log.snapshot());
  const device_analysis& d = a.devices.at(0);
  EXPECT_EQ(d.totals.at_peak[0], static_cast<std::int64_t>(4 * MiB));  // unknown
  EXPECT_EQ(d.totals.peak_allocated, static_cast<std::int64_t>(5 * MiB));
  EXPECT_EQ(d.samples.back().allocated, static_cast<std::int64_t>(1 * MiB));
  EXPECT_EQ(d.samples.back().by_category[0], 0);
  rig.alloc.deallocate(late);
  rig.alloc.set_log(&rig.recorder);
}

TEST(TimelineAnalysis, BlocksFromBeforeTheRecordingAreAsOldAsItAndTakeTags) {
  recorded_rig rig;
  rig.alloc.set_log(nullptr);
  rig.clk.advance(1'000'000'000'000);  // the clock's origin is long before recording (a process's start)
  void* weight = rig.alloc.allocate(4 * MiB);
  event_log log(rig.clk);
  log.add_initial(initial_device_state{0, rig.alloc.snapshot(), -1});
  rig.alloc.set_log(&log.open_allocator_recorder(0));
  rig.tick();
  event tag;
  tag.kind = event_kind::tag;
  tag.address = reinterpret_cast<std::uintptr_t>(weight);
  tag.category = category::parameter;
  tag.label = log.intern("fc.weight (parameter)");
  log.record(tag);
  rig.tick();
  void* act = rig.alloc.allocate(1 * MiB);
  rig.tick();
  const timeline t = log.snapshot();
  const timeline_analysis a = analyze(t);
  const device_analysis& d = a.devices.at(0);
  ASSERT_EQ(d.top_at_peak.size(), 2u);
  const live_block& w = d.top_at_peak[0];
  EXPECT_TRUE(w.before_recording);
  EXPECT_EQ(w.category, category::parameter);
  EXPECT_EQ(t.label_text(w.label), "fc.weight (parameter)");
  // Its age is counted from the recording's first event, not the clock's origin.
  EXPECT_LE(d.totals.peak_t_ns - w.t_alloc_ns, a.end_ns - a.start_ns);
  EXPECT_FALSE(d.top_at_peak[1].before_recording);
  EXPECT_EQ(format_age(w, d.totals.peak_t_ns).rfind(">= ", 0), 0u);
  rig.alloc.set_log(nullptr);
  rig.alloc.deallocate(act);
  rig.alloc.deallocate(weight);
  rig.alloc.set_log(&rig.recorder);
}

TEST(TimelineAnalysis, ARestoredBlockHoldsWhatItsTensorHeldBeforeTheEviction) {
  recorded_rig rig;
  event_log& log = rig.log;
  log.set_context({category::activation, log.intern("relu (ReLU)")});
  void* act = rig.alloc.allocate(2 * MiB);
  rig.tick();
  event evict = runtime_event(event_kind::eviction, 7, 2 * MiB, reinterpret_cast<std::uintptr_t>(act));
  log.record(evict);
  rig.alloc.deallocate(act);
  rig.tick();
  // Backward: the context is "gradient" when the runtime brings tensor 7 back.
  log.set_context({category::gradient, log.intern("backward")});
  void* back = rig.alloc.allocate(2 * MiB);
  log.record(runtime_event(event_kind::prefetch_begin, 7, 2 * MiB, reinterpret_cast<std::uintptr_t>(back)));
  rig.tick();
  log.record(runtime_event(event_kind::prefetch_end, 7, 2 * MiB, reinterpret_cast<std::uintptr_t>(back)));
  void* grad = rig.alloc.allocate(1 * MiB);  // a real gradient, made in the same context
  rig.tick();
  const timeline t = log.snapshot();
  const timeline_analysis a = analyze(t);
  const device_analysis& d = a.devices.at(0);
  const memory_sample& last = d.samples.back();
  EXPECT_EQ(last.by_category[static_cast<std::size_t>(category::activation)], static_cast<std::int64_t>(2 * MiB));
  EXPECT_EQ(last.by_category[static_cast<std::size_t>(category::gradient)], static_cast<std::int64_t>(1 * MiB));
  const auto restored = std::find_if(d.top_at_peak.begin(), d.top_at_peak.end(),
                                     [&](const live_block& b) { return b.address == reinterpret_cast<std::uintptr_t>(back); });
  ASSERT_NE(restored, d.top_at_peak.end());
  EXPECT_EQ(restored->category, category::activation);
  EXPECT_EQ(restored->origin, block_origin::prefetched);
  EXPECT_EQ(t.label_text(restored->label), "relu (ReLU)");
  rig.alloc.deallocate(back);
  rig.alloc.deallocate(grad);
}

TEST(TimelineAnalysis, TheBudgetIsTheOneInForceOverTime) {
  recorded_rig rig;
  void* a = rig.alloc.allocate(1 * MiB);
  rig.tick();
  rig.alloc.set_budget(8 * MiB);
  rig.tick();
  void* b = rig.alloc.allocate(4 * MiB);  // the peak, under the budget
  rig.tick();
  rig.alloc.deallocate(b);
  rig.alloc.set_budget(std::nullopt);  // the block ended: the budget is lifted
  rig.tick();
  rig.alloc.deallocate(a);
  const timeline_analysis an = analyze(rig.log.snapshot());
  const device_totals& t = an.devices.at(0).totals;
  ASSERT_EQ(t.budgets.size(), 3u);
  EXPECT_EQ(t.budgets[0].bytes, -1);
  EXPECT_EQ(t.budgets[1].bytes, static_cast<std::int64_t>(8 * MiB));
  EXPECT_EQ(t.budgets[2].bytes, -1);
  EXPECT_EQ(t.budgets[0].to_ns, t.budgets[1].from_ns);
  EXPECT_EQ(t.budgets[1].to_ns, t.budgets[2].from_ns);
  EXPECT_EQ(t.budget_at_peak, static_cast<std::int64_t>(8 * MiB));
  const std::string text = format_budgets(t.budgets, an.start_ns);
  EXPECT_NE(text.find("none until"), std::string::npos) << text;
  EXPECT_NE(text.find("8.00 MiB"), std::string::npos) << text;
  EXPECT_NE(text.find("none from"), std::string::npos) << text;
  EXPECT_EQ(format_budgets({budget_span{0, 5, 1024}}, 0), "1.00 KiB");
  EXPECT_EQ(format_budgets({}, 0), "none");
}

TEST(TimelineAnalysis, RuntimeTotalsMatchBeginsToEnds) {
  manual_clock clk;
  event_log log(clk);
  auto rec = [&](event e, std::int64_t advance) {
    log.record(e);
    clk.advance(advance);
  };
  rec(runtime_event(event_kind::offload_begin, 1, 4 * MiB), 300);
  event end = runtime_event(event_kind::offload_end, 1, 4 * MiB);
  end.host_bytes = static_cast<std::int64_t>(4 * MiB);
  rec(end, 100);
  event evict = runtime_event(event_kind::eviction, 2, MiB);
  evict.detail = 1;
  rec(evict, 0);
  rec(runtime_event(event_kind::recompute_begin, 2, MiB), 2000);
  rec(runtime_event(event_kind::recompute_end, 2, MiB), 0);
  rec(runtime_event(event_kind::prefetch_begin, 1, 4 * MiB), 700);
  event back = runtime_event(event_kind::prefetch_end, 1, 4 * MiB);
  back.host_bytes = 0;
  rec(back, 0);
  event stall = runtime_event(event_kind::stall, 1, 0);
  stall.detail = 650;
  rec(stall, 0);
  const timeline_analysis a = analyze(log.snapshot());
  const device_totals& t = a.devices.at(0).totals;
  EXPECT_EQ(t.offloads, 1u);
  EXPECT_EQ(t.offloaded_bytes, 4 * MiB);
  EXPECT_EQ(t.offload_ns, 300);
  EXPECT_EQ(t.prefetches, 1u);
  EXPECT_EQ(t.prefetch_ns, 700);
  EXPECT_EQ(t.recomputes, 1u);
  EXPECT_EQ(t.recompute_ns, 2000);
  EXPECT_EQ(t.evictions, 1u);
  EXPECT_EQ(t.dropped_evictions, 1u);
  EXPECT_EQ(t.stall_ns, 650);
  EXPECT_EQ(t.peak_host, static_cast<std::int64_t>(4 * MiB));
}

TEST(TimelineAnalysis, DownsamplingKeepsThePeakAndTheEnds) {
  std::vector<memory_sample> s(100000);
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i < s.size(); ++i) {
    s[i].t_ns = static_cast<std::int64_t>(i * 10);
    s[i].allocated = static_cast<std::int64_t>(rng() % 1000);
  }
  s[54321].allocated = 5000;
  const auto d = downsample(s, 600);
  EXPECT_LE(d.size(), 601u);
  EXPECT_EQ(d.front().t_ns, s.front().t_ns);
  EXPECT_EQ(d.back().t_ns, s.back().t_ns);
  const auto peak = std::max_element(d.begin(), d.end(), [](auto& a, auto& b) { return a.allocated < b.allocated; });
  EXPECT_EQ(peak->allocated, 5000);
  EXPECT_EQ(peak->t_ns, s[54321].t_ns);
  EXPECT_TRUE(std::is_sorted(d.begin(), d.end(), [](auto& a, auto& b) { return a.t_ns < b.t_ns; }));
}

// Random allocations, frees, tags, budget changes and cache releases: after
// every operation the last sample equals the allocator's statistics and the
// categories add up; at the end the peak equals the allocator's peak.
TEST(TimelineAnalysis, RandomisedRunMatchesAllocatorStatistics) {
  recorded_rig rig(1 << 20);
  std::mt19937_64 rng(1234);
  std::vector<void*> live;
  const category phases[] = {category::parameter, category::activation, category::gradient, category::optimizer_state,
                             category::unknown};
  for (int op = 0; op < 3000; ++op) {
    const auto r = rng() % 100;
    if (r < 50 || live.empty()) {
      rig.log.set_context({phases[rng() % 5], static_cast<label_id>(rng() % 4)});
      const std::size_t bytes = std::size_t{1} << (9 + rng() % 16);
      live.push_back(rig.alloc.allocate(bytes + rng() % 4096));
    } else if (r < 90) {
      const std::size_t i = rng() % live.size();
      rig.alloc.deallocate(live[i]);
      live[i] = live.back();
      live.pop_back();
    } else if (r < 95) {
      event tag;
      tag.kind = event_kind::tag;
      tag.address = reinterpret_cast<std::uintptr_t>(live[rng() % live.size()]);
      tag.category = phases[rng() % 5];
      rig.log.record(tag);
    } else {
      rig.alloc.empty_cache();
    }
    rig.tick();
  }
  const timeline_analysis a = analyze(rig.log.snapshot());
  const device_analysis& d = a.devices.at(0);
  for (const memory_sample& s : d.samples) ASSERT_EQ(sum(s), s.allocated);
  const allocator_stats st = rig.alloc.stats();
  EXPECT_EQ(d.samples.back().allocated, st.allocated_bytes.all().current);
  EXPECT_EQ(d.samples.back().reserved, st.reserved_bytes.all().current);
  EXPECT_EQ(d.totals.peak_allocated, st.allocated_bytes.all().peak);
  EXPECT_EQ(d.totals.peak_reserved, st.reserved_bytes.all().peak);
  std::uint64_t live_bytes = 0;
  for (const live_block& b : d.top_at_peak) live_bytes += b.bytes;
  EXPECT_LE(live_bytes, static_cast<std::uint64_t>(d.totals.peak_allocated));
  for (void* p : live) rig.alloc.deallocate(p);
}

}  // namespace
}  // namespace tp::profiler
