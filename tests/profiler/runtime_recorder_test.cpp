// runtime_recorder: a memory_runtime's events in the event log beside its
// allocator's, and what the analysis and the Perfetto export make of them.

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "profiler/allocator_recorder.hpp"
#include "profiler/event_log.hpp"
#include "profiler/runtime_recorder.hpp"
#include "profiler/timeline_analysis.hpp"
#include "runtime/runtime.hpp"
#include "tests/runtime/runtime_test_support.hpp"

namespace tp::profiler {
namespace {

using tp::testing::fake_binding;
using tp::testing::KiB;
using tp::testing::MiB;
using tp::testing::runtime_rig;

/// A runtime whose allocator and runtime both record into one log on the
/// rig's manual clock.
struct recorded_runtime {
  explicit recorded_runtime(policy_kind policy = policy_kind::hybrid)
      : rig({.latency_ns = 1000}), log(rig.clk), alloc_rec(log.open_allocator_recorder(0)), rt_rec(log, 0) {
    memory_runtime::options o;
    o.policy = policy;
    rt = std::make_unique<memory_runtime>(rig.dev, rig.alloc, rig.host, rig.clk, o);
    rig.alloc.set_log(&alloc_rec);
    rt->set_observer(&rt_rec);
  }
  ~recorded_runtime() {
    rt->set_observer(nullptr);
    rig.alloc.set_log(nullptr);
  }
  std::vector<event> runtime_events() const {
    std::vector<event> out;
    for (const event& e : log.snapshot().events) {
      if (is_runtime_kind(e.kind)) out.push_back(e);
    }
    return out;
  }
  runtime_rig rig;
  event_log log;
  allocator_recorder& alloc_rec;  // owned by log
  runtime_recorder rt_rec;
  std::unique_ptr<memory_runtime> rt;
};

std::vector<event_kind> kinds(const std::vector<event>& events) {
  std::vector<event_kind> out;
  for (const event& e : events) out.push_back(e.kind);
  return out;
}

TEST(RuntimeRecorder, MapsEveryRuntimeKindToTheProfilersOfTheSameName) {
  for (int k = 0; k <= static_cast<int>(runtime_event_kind::step); ++k) {
    const auto rk = static_cast<runtime_event_kind>(k);
    EXPECT_EQ(to_string(to_event_kind(rk)), to_string(rk));
    EXPECT_TRUE(is_runtime_kind(to_event_kind(rk)));
  }
}

TEST(RuntimeRecorder, SwapRoundTripLandsInTheLogWithTimesBytesAndHostTotals) {
  recorded_runtime r;
  fake_binding b(r.rig, 256 * KiB, 3);
  const tensor_id id = r.rt->track(b, b.bytes(), r.rig.compute, 0);
  ASSERT_TRUE(r.rt->offload(id));
  r.rig.clk.advance(5000);
  r.rt->poll();
  r.rt->access(id);  // restores with a 1000 ns stall of the compute stream, not the host
  EXPECT_EQ(r.rig.clk.now_ns(), 5000);
  r.rig.clk.advance(1000);
  r.rt->poll();  // sees the copy done: Note [Late copies] in runtime/transfer_engine.hpp
  r.rt->step();
  const std::vector<event> ev = r.runtime_events();
  ASSERT_EQ(kinds(ev), (std::vector<event_kind>{event_kind::offload_begin, event_kind::offload_end,
                                                event_kind::prefetch_begin, event_kind::prefetch_end,
                                                event_kind::stall, event_kind::step}));
  for (const event& e : ev) {
    if (e.kind != event_kind::step) {
      EXPECT_EQ(e.id, to_underlying(id));
    }
    EXPECT_EQ(e.device, 0);
  }
  EXPECT_EQ(ev[0].bytes, b.bytes());
  EXPECT_GE(ev[0].host_bytes, static_cast<std::int64_t>(b.bytes()));
  EXPECT_EQ(ev[1].t_ns - ev[0].t_ns, 5000);  // stamped by the log's clock
  EXPECT_EQ(ev[4].detail, 1000);
  EXPECT_EQ(ev[5].detail, 0);  // the first step that ended is step 0

  const timeline_analysis a = analyze(r.log.snapshot());
  ASSERT_EQ(a.devices.size(), 1u);
  const device_totals& t = a.devices[0].totals;
  EXPECT_EQ(t.offloads, 1u);
  EXPECT_EQ(t.offloaded_bytes, b.bytes());
  EXPECT_EQ(t.offload_ns, 5000);
  EXPECT_EQ(t.prefetches, 1u);
  EXPECT_EQ(t.stalls, 1u);
  EXPECT_EQ(t.stall_ns, 1000);
  EXPECT_GE(t.peak_host, static_cast<std::int64_t>(b.bytes()));
  EXPECT_EQ(a.steps_ns.size(), 1u);
  r.rt->untrack(id);
}

TEST(RuntimeRecorder, DropAndRecomputeAreCountedByTheAnalysis) {
  recorded_runtime r(policy_kind::dtr);
  fake_binding b(r.rig, 2 * MiB, 7);
  const tensor_id id = r.rt->track(b, b.bytes(), r.rig.compute, 1000);
  ASSERT_EQ(r.rt->reclaim(1, r.rig.compute), b.bytes());
  r.rt->access(id);
  const std::vector<event> ev = r.runtime_events();
  ASSERT_EQ(kinds(ev), (std::vector<event_kind>{event_kind::eviction, event_kind::recompute_begin,
                                                event_kind::recompute_end, event_kind::stall}));
  const timeline_analysis a = analyze(r.log.snapshot());
  const device_totals& t = a.devices.at(0).totals;
  EXPECT_EQ(t.evictions, 1u);
  EXPECT_EQ(t.dropped_evictions, 1u);
  EXPECT_EQ(t.recomputes, 1u);
  EXPECT_EQ(t.recomputed_bytes, b.bytes());
  r.rt->untrack(id);
}

}  // namespace
}  // namespace tp::profiler
