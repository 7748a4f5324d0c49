// tensorpager's policies against the figures of DTR's own simulator on DTR's
// two logs (bench/traces/dtr/README.md), at the same bytes, and defects found
// on them, each as a check that failed before its fix (history:
// docs/decisions.md, tests/sim/reference_test.cpp).

#include <gtest/gtest.h>

#include <array>
#include <string>

#include "sim/dtr_import.hpp"
#include "sim/simulator.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_io.hpp"

namespace tp::sim {
namespace {

std::string trace_path(const std::string& name) { return std::string(TP_SOURCE_DIR) + "/bench/traces/" + name; }

constexpr std::array<double, 8> ratios = {0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2};

// DTR's simulator (DTREqClass, recompute only), ratios of its baseline's
// peak of live bytes, from bench/traces/dtr/README.md ("Reference").
struct reference_log {
  const char* file;
  std::size_t peak_bytes;
  std::array<double, 8> slowdown;  // at `ratios`
};
constexpr reference_log resnet{"dtr/resnet32-bs56.log", 10'061'179'152,
                               {1.013, 1.025, 1.046, 1.074, 1.107, 1.140, 1.179, 1.332}};
constexpr reference_log transformer{"dtr/transformer-bs10.log", 9'864'405'000,
                                    {1.009, 1.020, 1.031, 1.044, 1.058, 1.091, 1.124, 1.545}};

// DTR's simulator has no allocator and lends nothing: its figures are met on
// plain segments with nothing lent, the setting bench/results/sim_dtr.md was
// measured with (Note [The simulator's defaults] in sim/simulator.hpp).
sim_options dtr_setting() {
  sim_options o;
  o.expandable_segments = false;
  o.lend = false;
  return o;
}

sim_report run(const trace& t, const sim_report& free_run, const reference_log& ref, double ratio,
               policy_kind p, std::size_t max_split = SIZE_MAX, const sim_options& base = dtr_setting()) {
  sim_options o = base;
  o.policy = p;
  o.max_split_size = max_split;
  o.budget_bytes = static_cast<std::size_t>(static_cast<double>(ref.peak_bytes) * ratio);
  sim_report r = simulate(t, o);
  compare(r, free_run);
  return r;
}

class Reference : public ::testing::TestWithParam<reference_log> {};

// The default policy (hybrid) at or below DTR's own figure at every ratio,
// and within 5% of the unconstrained step at 0.5: in DTR's setting, and with
// the runtime's defaults (expandable segments, lending; docs/simulator.md).
TEST_P(Reference, TheDefaultPolicyIsAtOrBelowDtrsOwnSimulatorAtEveryBudget) {
  const reference_log& ref = GetParam();
  const trace t = import_dtr_file(trace_path(ref.file));
  EXPECT_EQ(sim_options{}.policy, policy_kind::hybrid);
  for (const sim_options& base : {dtr_setting(), sim_options{}}) {
    const char* setting = base.expandable_segments ? "runtime's defaults" : "DTR's setting";
    const sim_report free_run = simulate(t, base);
    for (std::size_t k = 0; k < ratios.size(); ++k) {
      const sim_report r = run(t, free_run, ref, ratios[k], sim_options{}.policy, SIZE_MAX, base);
      ASSERT_TRUE(r.fits) << setting << ", " << ratios[k] << ": " << r.failure;
      EXPECT_LE(r.slowdown, ref.slowdown[k]) << setting << ", at ratio " << ratios[k];
      if (ratios[k] == 0.5) {
        EXPECT_LE(r.slowdown, 1.05) << setting;
      }
    }
  }
}

// `dtr` is DTR (issue 32 item 5; Note [DTR is recompute only] in
// runtime/dtr_policy.hpp): it fits wherever DTR's simulator does, never
// swaps, and runs within 2% of DTR's figure wherever the replay's model does
// not decide: ResNet-32 at every ratio (0.2 too since Note [DTR's
// staleness]: 1.325x against 1.332x) in both settings; the Transformer
// from 0.9 to 0.3 with expandable segments and to 0.4 on plain ones. Where
// it decides (bench/results/sim_dtr.md): the Transformer on plain segments
// at 0.3 and 0.2, which strand blocks (1.188x and 1.776x; DTR counts
// bytes), and at 0.2 with expandable segments, 1.192x, below DTR's 1.545x:
// tp-sim writes in place into one storage where DTR's simulator makes a
// new one per write and evicts the old, so DTR prices a layer norm's
// output with its evicted neighbour (the matmul output before its bias was
// added in place) and keeps it, where tp-sim drops it (op 164).
TEST_P(Reference, DtrIsWithinTwoPercentOfItsReferenceAndNeverSwaps) {
  const reference_log& ref = GetParam();
  const trace t = import_dtr_file(trace_path(ref.file));
  const bool transformer_log = ref.peak_bytes == transformer.peak_bytes;
  sim_options expandable = dtr_setting();
  expandable.expandable_segments = true;
  for (const sim_options& base : {dtr_setting(), expandable}) {
    const char* setting = base.expandable_segments ? "expandable, nothing lent" : "DTR's setting";
    const sim_report free_run = simulate(t, base);
    for (std::size_t k = 0; k < ratios.size(); ++k) {
      const sim_report r = run(t, free_run, ref, ratios[k], policy_kind::dtr, SIZE_MAX, base);
      ASSERT_TRUE(r.fits) << setting << ", " << ratios[k] << ": " << r.failure;
      EXPECT_EQ(r.offloaded_bytes, 0u) << setting << ", " << ratios[k];
      EXPECT_EQ(r.evictions, r.drops) << setting << ", " << ratios[k] << ": every eviction a drop";
      const bool stranded = transformer_log && !base.expandable_segments && ratios[k] < 0.35;
      if (stranded || (transformer_log && ratios[k] < 0.25)) continue;
      EXPECT_NEAR(r.slowdown / ref.slowdown[k], 1.0, 0.02) << setting << ", at ratio " << ratios[k];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Logs, Reference, ::testing::Values(resnet, transformer),
                         [](const auto& p) { return p.param.peak_bytes == resnet.peak_bytes ? "resnet32" : "transformer"; });

// No cliffs, every policy, the runtime's defaults: slowdown never falls by
// more than 2% as the budget shrinks, and a ratio that does not fit is
// followed by none that does (what failed before: docs/decisions.md).
// LRU and Capuchin keep one known exception each, on the Transformer log
// (bench/results/sim_dtr.md), checked loosely.
TEST(NoCliffs, FittingIsMonotoneAndSlowdownDoesNotFallAsTheBudgetShrinks) {
  for (const char* file : {"dtr/resnet32-bs56.log", "dtr/transformer-bs10.log"}) {
    const trace t = import_dtr_file(trace_path(file));
    const sweep_result s = run_sweep(t, {}, default_ratios(), all_policies());
    for (std::size_t p = 0; p < s.points.size(); ++p) {
      const policy_kind kind = s.policies[p];
      const double tolerance = kind == policy_kind::lru || kind == policy_kind::capuchin ? 0.05 : 0.02;
      double previous = 1.0;
      bool fitted = true;
      for (const sweep_point& pt : s.points[p]) {
        if (!pt.report.fits) {
          fitted = false;
          continue;
        }
        EXPECT_TRUE(fitted) << file << " " << to_string(kind) << " fits at " << pt.ratio << " but not above";
        EXPECT_GE(pt.report.slowdown, previous - tolerance) << file << " " << to_string(kind) << " at " << pt.ratio;
        EXPECT_LE(pt.report.peak_reserved, *pt.report.budget_bytes);
        previous = std::max(previous, pt.report.slowdown);
      }
      // Down to 0.3 everything fits (0.2 and 0.1 depend on fragmentation).
      for (const sweep_point& pt : s.points[p]) {
        if (pt.ratio > 0.25) {
          EXPECT_TRUE(pt.report.fits) << file << " " << to_string(kind) << " at " << pt.ratio;
        }
      }
    }
  }
}

// No thrashing: where some policy fits under 1.5x, no policy recomputes more
// than the step's own compute (with proactive offload off, DTR thrashed on
// ResNet-32: docs/decisions.md; Note [Recompute limit]); in DTR's setting
// and with the runtime's defaults. `dtr` too, which is DTR's heuristic,
// recompute only, with no recompute limit (Note [DTR is recompute only]),
// but on the Transformer on plain segments at 0.2, where stranded blocks
// make it recompute 5.6x the step at this sweep's 0.2 (of tp-sim's own
// peak; 0.78x at DTR's 0.2, 30 MiB less: bench/results/sim_dtr.md; its
// figures at DTR's: DtrIsWithinTwoPercentOfItsReferenceAndNeverSwaps).
TEST(NoThrashing, NoPolicyRecomputesMoreThanTheStepWhereAnotherFitsUnderOneAndAHalf) {
  for (const char* file : {"dtr/resnet32-bs56.log", "dtr/transformer-bs10.log"}) {
    const trace t = import_dtr_file(trace_path(file));
    for (const sim_options& setting : {dtr_setting(), sim_options{}}) {
      for (bool proactive : {true, false}) {
        sim_options base = setting;
        base.proactive_offload = proactive;
        const sweep_result s = run_sweep(t, base, default_ratios(), all_policies());
        for (std::size_t r = 0; r < s.ratios.size(); ++r) {
          bool someone_fits_well = false;
          for (std::size_t p = 0; p < s.points.size(); ++p) {
            someone_fits_well =
                someone_fits_well || (s.points[p][r].report.fits && s.points[p][r].report.slowdown < 1.5);
          }
          if (!someone_fits_well) continue;
          for (std::size_t p = 0; p < s.points.size(); ++p) {
            const sim_report& rep = s.points[p][r].report;
            if (!rep.fits) continue;
            const bool stranded = s.policies[p] == policy_kind::dtr && !setting.expandable_segments &&
                                  std::string(file) == "dtr/transformer-bs10.log" && s.ratios[r] < 0.25;
            if (stranded) continue;
            EXPECT_LE(rep.recompute_ns, rep.compute_ns)
                << file << " " << to_string(s.policies[p]) << " at " << s.ratios[r] << (proactive ? "" : ", proactive off")
                << (setting.expandable_segments ? ", runtime's defaults" : ", DTR's setting");
          }
        }
      }
    }
  }
}

// Proactive offload never costs at a budget the step fits in.
TEST(NoCliffs, ABudgetTheStepFitsInCostsNothing) {
  for (const char* file : {"dtr/resnet32-bs56.log", "dtr/transformer-bs10.log"}) {
    const trace t = import_dtr_file(trace_path(file));
    const sim_report free_run = simulate(t, {});
    for (policy_kind p : all_policies()) {
      sim_options o;
      o.policy = p;
      o.budget_bytes = free_run.peak_reserved;
      sim_report r = simulate(t, o);
      compare(r, free_run);
      ASSERT_TRUE(r.fits);
      EXPECT_EQ(r.slowdown, 1.0) << file << " " << to_string(p);
      EXPECT_EQ(r.offloaded_bytes, 0u) << file << " " << to_string(p);
    }
  }
}

// The recorded traces: fitting is monotone for every policy (the LSTM fitted
// at 0.9 and 0.7 but not 0.8 with LRU).
TEST(RecordedTraces, FittingIsMonotoneForEveryPolicy) {
  for (const char* file : {"resnet18.trace", "transformer.trace", "lstm.trace"}) {
    const trace t = read_trace_file(trace_path(file));
    sim_options base;
    base.compute_scale = 0.01;
    const sweep_result s = run_sweep(t, base, default_ratios(), all_policies());
    for (std::size_t p = 0; p < s.points.size(); ++p) {
      bool fitted = true;
      for (const sweep_point& pt : s.points[p]) {
        if (!pt.report.fits) {
          fitted = false;
          continue;
        }
        EXPECT_TRUE(fitted) << file << " " << to_string(s.policies[p]) << " fits at " << pt.ratio << " but not above";
      }
    }
  }
}

}  // namespace
}  // namespace tp::sim
