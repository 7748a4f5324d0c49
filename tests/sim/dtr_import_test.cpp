// DTR's operator logs: the importer's reference semantics on a small log, and
// the two published traces replayed through the simulator.

#include "sim/dtr_import.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "core/errors.hpp"
#include "sim/recompute_plan.hpp"
#include "sim/simulator.hpp"
#include "sim/sweep.hpp"

namespace tp::sim {
namespace {

trace import(const std::string& text) {
  std::istringstream in(text);
  return import_dtr_log(in, "small.log");
}

// Frees in event order.
std::vector<storage_id> frees(const trace& t) {
  std::vector<storage_id> out;
  for (const event& e : t.events) {
    if (e.what == event::kind::free) out.push_back(e.id);
  }
  return out;
}

constexpr const char* small_log =
    R"({"ANNOTATION":"START","INSTRUCTION":"ANNOTATE"})" "\n"
    R"({"INSTRUCTION":"CONSTANT","NAME":"w"})" "\n"
    R"({"INSTRUCTION":"MEMORY","MEMORY":"1024","NAME":"w"})" "\n"
    R"({"DST":"w2","INSTRUCTION":"COPY","SRC":"w"})" "\n"
    R"({"INSTRUCTION":"RELEASE","NAME":"w"})" "\n"
    R"({"ARGS":["w2"],"INSTRUCTION":"CALL","NAME":"relu","RESULT":["a"],"TIME":"100"})" "\n"
    R"({"INSTRUCTION":"MEMORY","MEMORY":"4096","NAME":"a"})" "\n"
    R"({"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"a"})" "\n"
    R"({"ARGS":["a"],"INSTRUCTION":"CALL","NAME":"view","RESULT":["v"],"TIME":"5"})" "\n"
    R"({"INSTRUCTION":"MEMORY","MEMORY":"4096","NAME":"v"})" "\n"
    R"({"ALIAS":"0","INSTRUCTION":"ALIAS","NAME":"v"})" "\n"
    R"({"ARGS":["v","w2"],"INSTRUCTION":"MUTATE","MUTATE":[0],"NAME":"add_","TIME":"7"})" "\n"
    R"({"ANNOTATION":"BACKWARD","INSTRUCTION":"ANNOTATE"})" "\n"
    R"({"ARGS":["v"],"INSTRUCTION":"CALL","NAME":"neg","RESULT":["b"],"TIME":"20"})" "\n"
    R"({"INSTRUCTION":"MEMORY","MEMORY":"2048","NAME":"b"})" "\n"
    R"({"ALIAS":"-1","INSTRUCTION":"ALIAS","NAME":"b"})" "\n"
    R"({"INSTRUCTION":"RELEASE","NAME":"a"})" "\n"   // v still holds the storage
    R"({"DST":"v","INSTRUCTION":"COPY_FROM","SRC":"b"})" "\n"  // a's storage loses its last tensor
    R"({"INSTRUCTION":"RELEASE","NAME":"b"})" "\n";  // v still refers to b

TEST(DtrImport, FollowsReferencesAliasesAndMutations) {
  const trace t = import(small_log);
  ASSERT_EQ(t.storages.size(), 3u);  // w, a, b; the view v has none of its own
  EXPECT_TRUE(t.storages[0].pre_existing);
  EXPECT_EQ(t.storages[0].bytes, 1024u);
  ASSERT_EQ(t.ops.size(), 4u);
  const storage_id w = t.storages[0].id, a = t.storages[1].id, b = t.storages[2].id;
  EXPECT_EQ(t.ops[0].outputs, std::vector<storage_id>{a});
  EXPECT_TRUE(t.storages[1].saved);
  EXPECT_TRUE(t.ops[1].outputs.empty());                    // view: no allocation
  EXPECT_EQ(t.ops[1].inputs, std::vector<storage_id>{a});
  EXPECT_EQ(t.ops[2].mutates, std::vector<storage_id>{a});  // in place, through the view
  EXPECT_TRUE(t.ops[2].outputs.empty());
  EXPECT_EQ(t.ops[3].inputs, std::vector<storage_id>{a});
  EXPECT_EQ(t.ops[3].when, phase::backward);
  EXPECT_EQ(t.ops[0].when, phase::forward);
  // a is freed only when the view's reference is re-pointed; w and b live on.
  EXPECT_EQ(frees(t), std::vector<storage_id>{a});
  (void)w;
  (void)b;
  EXPECT_EQ(t.compute_ns(), 132);
  // a is written in place after relu produced it: a replay of relu and then
  // of add_ re-creates it (Note [Recomputable storages]).
  const recompute_plan plan = recompute_plan::build(t);
  EXPECT_TRUE(plan.recomputable[1]);
  EXPECT_EQ(plan.writers[1], std::vector<std::size_t>{2});
}

TEST(DtrImport, MalformedLogsNameTheLine) {
  const auto message = [](const std::string& text) -> std::string {
    try {
      import(text);
    } catch (const error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(message(R"({"INSTRUCTION":"RELEASE","NAME":"x"})" "\n").find("small.log:1: reference 'x'"),
            std::string::npos);
  EXPECT_NE(message(R"({"INSTRUCTION":"JUMP"})" "\n").find("unknown INSTRUCTION 'JUMP'"), std::string::npos);
  EXPECT_NE(message("{oops\n").find("small.log:1: not valid JSON"), std::string::npos);
  EXPECT_NE(message(R"({"ARGS":[],"INSTRUCTION":"CALL","NAME":"f","RESULT":["r"],"TIME":"ten"})" "\n")
                .find("'\"ten\"' is not an integer"),
            std::string::npos);
  EXPECT_NE(message(R"({"ARGS":[],"INSTRUCTION":"CALL","NAME":"f","RESULT":["r"],"TIME":"1"})" "\n")
                .find("no MEMORY and ALIAS"),
            std::string::npos);
}

std::string dtr_path(const char* name) { return std::string(TP_SOURCE_DIR) + "/bench/traces/dtr/" + name; }

class DtrTrace : public ::testing::TestWithParam<const char*> {};

TEST_P(DtrTrace, ImportsAndReplaysUnconstrainedAtExactlyTheRecordedTime) {
  EXPECT_TRUE(looks_like_dtr(dtr_path(GetParam())));
  const trace t = import_dtr_file(dtr_path(GetParam()));
  EXPECT_GT(t.ops.size(), 200u);
  const sim_report free_run = simulate(t, {});
  ASSERT_TRUE(free_run.fits);
  sim_report again = free_run;
  compare(again, free_run);
  EXPECT_EQ(again.slowdown, 1.0);
  EXPECT_EQ(free_run.step_ns, t.compute_ns());
  EXPECT_EQ(free_run.offloaded_bytes, 0u);
  EXPECT_EQ(free_run.recompute_ns, 0);
}

// Slowdown may not fall as the budget shrinks. Tolerance: 2% of the
// unconstrained step (policies sample and plan, so a smaller budget can
// happen to pick slightly better victims). Once a ratio does not fit, no
// smaller one may fit either. The runtime's proactive offloading is off
// here: it starts copies ahead of a peak it predicts from live bytes, and
// with it a smaller budget can cost less (bench/results/sim_dtr.md). That is
// a finding about the runtime, measured by the committed sweeps, not a
// property this test can promise. Nor is DTR's slowdown monotone once every
// ratio fits: its sampled choice (while an operator's inputs stay pinned,
// Note [Operator inputs are pinned] in simulator.cpp) swings the recompute
// volume; its fitting is still checked. Ratios stop at 0.2: at 0.1 DTR
// recomputes too often for a test. Measured: docs/decisions.md.
TEST_P(DtrTrace, SlowdownDoesNotDecreaseAsTheBudgetShrinks) {
  const trace t = import_dtr_file(dtr_path(GetParam()));
  sim_options o;
  o.proactive_offload = false;
  std::vector<double> ratios = default_ratios();
  ratios.pop_back();  // 0.1
  const sweep_result s = run_sweep(t, o, ratios, all_policies());
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    double previous = 1.0;
    bool fitted = true;
    for (const sweep_point& pt : s.points[p]) {
      const char* name = to_string(s.policies[p]);
      if (!pt.report.fits) {
        fitted = false;
        continue;
      }
      EXPECT_TRUE(fitted) << name << " fits at " << pt.ratio << " but not at a larger ratio";
      if (s.policies[p] == policy_kind::dtr) continue;
      EXPECT_GE(pt.report.slowdown, previous - 0.02) << name << " at ratio " << pt.ratio;
      EXPECT_LE(pt.report.peak_reserved, *pt.report.budget_bytes) << name << " at ratio " << pt.ratio;
      previous = std::max(previous, pt.report.slowdown);
    }
    EXPECT_TRUE(s.points[p].front().report.fits) << to_string(s.policies[p]) << " at ratio 1.0";
  }
}

TEST_P(DtrTrace, SameInputsGiveTheSameReport) {
  const trace t = import_dtr_file(dtr_path(GetParam()));
  const sim_report free_run = simulate(t, {});
  sim_options o;
  o.policy = policy_kind::dtr;
  o.budget_bytes = budget_for_ratio(free_run, 0.4);
  const sim_report a = simulate(t, o), b = simulate(t, o);
  EXPECT_EQ(a.fits, b.fits);
  EXPECT_EQ(a.step_ns, b.step_ns);
  EXPECT_EQ(a.peak_reserved, b.peak_reserved);
  EXPECT_EQ(a.recompute_ns, b.recompute_ns);
  EXPECT_EQ(a.offloaded_bytes, b.offloaded_bytes);
  EXPECT_EQ(a.evictions, b.evictions);
}

INSTANTIATE_TEST_SUITE_P(Logs, DtrTrace, ::testing::Values("resnet32-bs56.log", "transformer-bs10.log"),
                         [](const auto& p) {
                           return std::string(p.param).substr(0, std::string(p.param).find('-'));
                         });

}  // namespace
}  // namespace tp::sim
