// The Perfetto JSON: it parses, async slices pair up, every track's
// timestamps are monotone, counters equal the allocator's statistics at the
// same point, and a full log says how many events it dropped.

#include <gtest/gtest.h>

#include <map>
// GCC 12 at -O2 and above reports -Wnull-dereference inside json.hpp once
// it is inlined here; the warning concerns nlohmann's code, not ours.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <nlohmann/json.hpp>
#pragma GCC diagnostic pop
#include <string>
#include <tuple>
#include <vector>

#include "profiler/perfetto_exporter.hpp"
#include "profiler_test_support.hpp"

namespace tp::profiler {
namespace {

using namespace tp::profiler::testing;
using json = nlohmann::json;

/// A short training-like run with synthetic runtime events around it, and
/// the allocator's statistics after each step, keyed by the clock.
struct scripted_run {
  recorded_rig rig;
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> stats_at;  // t_ns -> allocated, reserved

  void note_stats() {
    const allocator_stats s = rig.alloc.stats();
    stats_at[rig.clk.now_ns()] = {s.allocated_bytes.all().current, s.reserved_bytes.all().current};
    rig.tick();
  }

  void run() {
    rig.alloc.set_budget(512 * MiB);
    note_stats();
    std::vector<void*> live;
    for (int step = 0; step < 3; ++step) {
      for (int i = 0; i < 6; ++i) {
        live.push_back(rig.alloc.allocate((static_cast<std::size_t>(i) + 1) * 3 * MiB));
        note_stats();
      }
      rig.log.record(runtime_event(event_kind::offload_begin, 100 + static_cast<std::uint64_t>(step), 3 * MiB));
      rig.tick();
      event end = runtime_event(event_kind::offload_end, 100 + static_cast<std::uint64_t>(step), 3 * MiB);
      end.host_bytes = static_cast<std::int64_t>(3 * MiB);
      rig.log.record(end);
      rig.log.record(runtime_event(event_kind::recompute_begin, 200 + static_cast<std::uint64_t>(step), MiB));
      rig.tick();
      event stall = runtime_event(event_kind::stall, 100, 0);
      stall.detail = 1500;
      rig.log.record(stall);
      rig.log.record(runtime_event(event_kind::recompute_end, 200 + static_cast<std::uint64_t>(step), MiB));
      while (!live.empty()) {
        rig.alloc.deallocate(live.back());
        live.pop_back();
        note_stats();
      }
      event boundary;
      boundary.kind = event_kind::step;
      boundary.detail = step;
      rig.log.record(boundary);
      rig.tick();
    }
    rig.log.record(runtime_event(event_kind::prefetch_begin, 300, 3 * MiB));  // never ends
    rig.tick();
    rig.alloc.empty_cache();
    note_stats();
  }
};

json parse(const timeline& t) { return json::parse(to_perfetto_json(t)); }

TEST(PerfettoExporter, ParsesWithTheSavedTimelineAlongside) {
  scripted_run r;
  r.run();
  const timeline t = r.rig.log.snapshot();
  const json doc = parse(t);
  ASSERT_TRUE(doc.contains("traceEvents"));
  EXPECT_EQ(doc["otherData"]["producer"], "tensorpager");
  EXPECT_EQ(doc["tensorpager"]["format"], "tensorpager.timeline");
  // The snapshot's events, folded frees expanded (Note [Folded frees]).
  EXPECT_EQ(doc["tensorpager"]["events"].size(), t.events.size());
  EXPECT_GT(t.events.size(), r.rig.log.size());
}

TEST(PerfettoExporter, EveryAsyncBeginHasItsEnd) {
  scripted_run r;
  r.run();
  const json doc = parse(r.rig.log.snapshot());
  std::map<std::tuple<std::string, std::string, std::uint64_t>, int> open;
  int begins = 0;
  bool saw_unfinished = false;
  for (const json& e : doc["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph != "b" && ph != "e") continue;
    const auto key = std::make_tuple(e["cat"].get<std::string>(), e["name"].get<std::string>(), e["id"].get<std::uint64_t>());
    if (ph == "b") {
      ++open[key];
      ++begins;
    } else {
      ASSERT_GT(open[key], 0) << "an end without a begin: " << e.dump();
      --open[key];
      saw_unfinished |= e["args"].value("unfinished", false);
    }
  }
  EXPECT_EQ(begins, 3 + 3 + 1);  // offloads, recomputes, the unfinished prefetch
  for (const auto& [key, n] : open) EXPECT_EQ(n, 0) << std::get<1>(key) << " " << std::get<2>(key);
  EXPECT_TRUE(saw_unfinished);
}

TEST(PerfettoExporter, TimestampsAreMonotonePerTrack) {
  scripted_run r;
  r.run();
  const json doc = parse(r.rig.log.snapshot());
  std::map<std::string, double> last;  // per track
  std::size_t checked = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M") continue;
    const std::string track = e["ph"] == "C" ? "C/" + std::to_string(e["pid"].get<int>()) + "/" + e["name"].get<std::string>()
                                             : std::to_string(e["pid"].get<int>()) + "/" + std::to_string(e["tid"].get<int>());
    const double ts = e["ts"];
    if (last.count(track) != 0) {
      EXPECT_LE(last[track], ts) << track;
    }
    last[track] = ts;
    ++checked;
  }
  EXPECT_GT(checked, 50u);
}

TEST(PerfettoExporter, CountersEqualTheAllocatorsStatisticsAtTheSamePoint) {
  scripted_run r;
  r.run();
  const timeline t = r.rig.log.snapshot();
  const json doc = parse(t);
  const auto t0 = doc["otherData"]["t0_ns"].get<std::int64_t>();
  std::map<std::string, std::vector<std::pair<std::int64_t, std::int64_t>>> series;  // name -> (t_ns, bytes)
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "C") continue;
    const auto t_ns = t0 + static_cast<std::int64_t>(std::llround(e["ts"].get<double>() * 1000.0));
    series[e["name"]].emplace_back(t_ns, e["args"]["bytes"].get<std::int64_t>());
  }
  auto value_at = [&](const std::string& name, std::int64_t t_ns) {
    std::int64_t v = 0;
    for (const auto& [ts, bytes] : series[name]) {
      if (ts <= t_ns) v = bytes;
    }
    return v;
  };
  ASSERT_FALSE(r.stats_at.empty());
  for (const auto& [t_ns, stat] : r.stats_at) {
    EXPECT_EQ(value_at("allocated", t_ns), stat.first) << "at " << t_ns;
    EXPECT_EQ(value_at("reserved", t_ns), stat.second) << "at " << t_ns;
  }
  EXPECT_EQ(value_at("budget", t.events.back().t_ns), static_cast<std::int64_t>(512 * MiB));
  EXPECT_EQ(value_at("host (offloaded)", t.events.back().t_ns), static_cast<std::int64_t>(3 * MiB));
}

TEST(PerfettoExporter, InstantsAndStepSlicesAppear) {
  scripted_run r;
  r.run();
  const json doc = parse(r.rig.log.snapshot());
  int stalls = 0, steps = 0, segments = 0;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "i" && e["name"] == "stall") {
      ++stalls;
      EXPECT_EQ(e["args"]["duration_ns"], 1500);
    }
    if (e["ph"] == "X") {
      ++steps;
      EXPECT_GE(e["dur"].get<double>(), 0.0);
    }
    if (e["ph"] == "i" && e["name"] == "segment_alloc") ++segments;
  }
  EXPECT_EQ(stalls, 3);
  EXPECT_EQ(steps, 3);
  EXPECT_GT(segments, 0);
}

TEST(PerfettoExporter, ReportsTheDroppedCountWhenTheCapIsHit) {
  recorded_rig rig(/*max_events=*/50);
  for (int i = 0; i < 100; ++i) {
    rig.alloc.deallocate(rig.alloc.allocate(4 * KiB));
    rig.tick();
  }
  const timeline t = rig.log.snapshot();
  ASSERT_GT(t.dropped, 0u);
  const json doc = parse(t);
  EXPECT_EQ(doc["otherData"]["dropped_events"].get<std::uint64_t>(), t.dropped);
  EXPECT_EQ(doc["otherData"]["max_events"], 50);
  bool instant = false;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "i" && e["name"] == "events dropped: log full") {
      instant = true;
      EXPECT_EQ(e["args"]["dropped_events"].get<std::uint64_t>(), t.dropped);
    }
  }
  EXPECT_TRUE(instant);
  EXPECT_EQ(doc["tensorpager"]["dropped"].get<std::uint64_t>(), t.dropped);
}

TEST(PerfettoExporter, EscapesLabelsAndWritesAnEmptyTimeline) {
  manual_clock clk;
  event_log log(clk);
  event e = runtime_event(event_kind::stall, 1, 0);
  e.label = log.intern("a \"quoted\" </script>\n label");
  log.record(e);
  const json doc = parse(log.snapshot());
  bool found = false;
  for (const json& x : doc["traceEvents"]) {
    if (x["ph"] == "i") found = x["args"]["label"] == "a \"quoted\" </script>\n label";
  }
  EXPECT_TRUE(found);
  EXPECT_NO_THROW(json::parse(to_perfetto_json(timeline{})));
}

}  // namespace
}  // namespace tp::profiler
