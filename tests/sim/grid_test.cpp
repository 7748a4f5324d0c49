// Issue 32 item 4, the CI half: a sampled corner of the grid that
// bench/sim_grid.py runs in full (bench/results/sim_grid.md), with tp-sim's
// defaults (the runtime's: expandable segments, lending). The default policy
// (hybrid) must fit wherever lru (swap only) or dtr (recompute only) fits,
// stay within 2% of the better of the two, and not get cheaper as the budget
// shrinks; every policy must fit at every ratio above one where it fits.
// The cells that break a rule today are listed below as known exceptions,
// with their figures (bench/results/sim_grid.md, "Finding"): a cell that
// starts to break a rule fails the test, and so does an exception that no
// longer happens (so that the list shrinks as the planner improves).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "sim/dtr_import.hpp"
#include "sim/simulator.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_io.hpp"

namespace tp::sim {
namespace {

std::string trace_path(const std::string& name) { return std::string(TP_SOURCE_DIR) + "/bench/traces/" + name; }

const std::vector<double> ratios = {0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2};

struct sample {
  const char* file;
  bool dtr_log;
  std::optional<std::size_t> ratio_of;  // DTR's baseline peak for its logs
  double gbps;
};

// DTR's ResNet-32 log at a slow and a fast link; the recorded traces at the
// slowest and the fastest (DTR's Transformer log is left to the benchmark: it
// alone takes longer than the rest together).
const std::vector<sample> samples = {
    {"dtr/resnet32-bs56.log", true, 10'061'179'152, 12},
    {"dtr/resnet32-bs56.log", true, 10'061'179'152, 50},
    {"resnet18.trace", false, std::nullopt, 8},
    {"resnet18.trace", false, std::nullopt, 50},
    {"transformer.trace", false, std::nullopt, 8},
    {"transformer.trace", false, std::nullopt, 50},
    {"lstm.trace", false, std::nullopt, 8},
    {"lstm.trace", false, std::nullopt, 50},
};

using cell = std::tuple<std::string, double, double>;  // file, GB/s, ratio

// Known exceptions, measured 2026-11-29 (bench/results/sim_grid.md), after a
// reclaim's swap came to be priced with its offload exposed (Note [Hybrid
// fallback]) and large requests came to take the small pool's free blocks
// as the last resort.
// hybrid above 1.02x the better of lru and dtr: it swaps where the link is
// too slow for its swaps to hide (issue 32 item 3).
const std::set<cell> known_over_two_percent = {
    {"dtr/resnet32-bs56.log", 12, 0.2},  // 1.984x, dtr 1.326x
    {"resnet18.trace", 8, 0.6},          // 1.441x, lru 1.185x
    {"transformer.trace", 8, 0.6},       // 1.093x, lru 1.055x
    {"transformer.trace", 8, 0.5},       // 1.174x, lru 1.070x
    {"transformer.trace", 8, 0.4},       // 1.229x, lru 1.144x
    {"resnet18.trace", 50, 0.5},         // 1.368x, dtr 1.326x (lru does not fit)
};
// hybrid out of memory where dtr fits (lru does not): none in the sample
// since a large request may take the small pool's free range as the last
// resort (Note [Small requests from large blocks]).
const std::set<cell> known_not_fitting = {};
// hybrid cheaper than at a larger ratio, by more than rounding (0.001).
const std::set<cell> known_not_monotone = {
    {"resnet18.trace", 8, 0.5},  // 1.319x after 1.441x at 0.6
};

TEST(SimGrid, TheDefaultPolicyKeepsTheGridsPropertiesOnASample) {
  std::set<cell> over, not_fitting, not_monotone;
  for (const sample& s : samples) {
    const trace t = s.dtr_log ? import_dtr_file(trace_path(s.file)) : read_trace_file(trace_path(s.file));
    sim_options base;  // tp-sim's defaults: the runtime's
    base.bandwidth_bytes_per_s = s.gbps * 1e9;
    if (!s.dtr_log) base.compute_scale = 0.01;
    const sweep_result sw = run_sweep(t, base, ratios, all_policies(), s.ratio_of);
    auto index = [&](policy_kind k) {
      return static_cast<std::size_t>(std::find(sw.policies.begin(), sw.policies.end(), k) - sw.policies.begin());
    };
    const std::size_t lru = index(policy_kind::lru), dtr = index(policy_kind::dtr), hybrid = index(policy_kind::hybrid);
    ASSERT_EQ(sim_options{}.policy, policy_kind::hybrid);
    double largest_above = 0;
    for (std::size_t r = 0; r < ratios.size(); ++r) {
      const cell c{s.file, s.gbps, ratios[r]};
      const sim_report& h = sw.points[hybrid][r].report;
      std::optional<double> best;
      for (std::size_t p : {lru, dtr}) {
        const sim_report& rep = sw.points[p][r].report;
        if (rep.fits) best = std::min(best.value_or(rep.slowdown), rep.slowdown);
      }
      if (best && !h.fits) not_fitting.insert(c);
      if (best && h.fits && h.slowdown > 1.02 * *best) over.insert(c);
      if (h.fits) {
        if (h.slowdown < largest_above - 0.0015) not_monotone.insert(c);
        largest_above = std::max(largest_above, h.slowdown);
      }
    }
    // Every policy: no ratio fits below one that does not.
    for (std::size_t p = 0; p < sw.policies.size(); ++p) {
      bool fitted = true;
      for (std::size_t r = 0; r < ratios.size(); ++r) {
        const bool fits = sw.points[p][r].report.fits;
        EXPECT_TRUE(fitted || !fits) << s.file << " at " << s.gbps << " GB/s: " << to_string(sw.policies[p])
                                     << " fits at " << ratios[r] << " but not above";
        fitted = fitted && fits;
      }
    }
  }
  auto describe = [](const std::set<cell>& cells) {
    std::string out;
    for (const auto& [file, gbps, ratio] : cells) out += "\n  " + file + " " + std::to_string(gbps) + " GB/s " + std::to_string(ratio);
    return out;
  };
  EXPECT_EQ(over, known_over_two_percent) << "hybrid above 1.02x the better of lru and dtr at:" << describe(over);
  EXPECT_EQ(not_fitting, known_not_fitting) << "hybrid out of memory where lru or dtr fits at:" << describe(not_fitting);
  EXPECT_EQ(not_monotone, known_not_monotone) << "hybrid cheaper than at a larger ratio at:" << describe(not_monotone);
}

}  // namespace
}  // namespace tp::sim
