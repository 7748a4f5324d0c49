// Note [Lending in the simulator] and Note [Least budget] on a small training
// step with known answers: what is lent when, and what the least budget is
// with and without lending; then that the simulator meets a budget between
// the two only when it lends, and never one below the least budget.

#include <gtest/gtest.h>

#include <algorithm>

#include "sim/least_budget.hpp"
#include "sim/lend_plan.hpp"
#include "sim/simulator.hpp"
#include "sim/sweep.hpp"
#include "synthetic_traces.hpp"

namespace tp::sim {
namespace {

using namespace tp::sim::testing;

constexpr std::size_t weight = 8 * MiB;
constexpr std::size_t act = 16 * MiB;

// Two layers, SGD with momentum. Events:
//  0 a1 = linear(x, w1)          forward, saved
//  1 a2 = linear(a1, w2)         forward, saved
//  2 g2 = loss_backward(a2)      backward
//  3 gw2 = weight_grad(a1, g2)   backward: w2's gradient, kept for the optimizer
//  4 g1 = input_grad(g2, w2)     backward: w2's last use
//  5 free g2, 6 free a2
//  7 gw1 = weight_grad(x, g1)    backward, the window's last op
//  8 free g1, 9 free a1
// 10 sgd(w1, gw1, m1), 11 sgd(w2, gw2, m2)   forward
struct step {
  storage_id w1, w2, m1, m2, x, gw2;
  trace t;
};

step two_layer_step() {
  trace_builder b;
  step s{};
  s.w1 = b.pre_existing(weight);
  s.w2 = b.pre_existing(weight);
  s.m1 = b.pre_existing(weight);
  s.m2 = b.pre_existing(weight);
  s.x = b.pre_existing(1 * MiB);
  const storage_id a1 = b.op("linear", {s.x, s.w1}, act, true, 1'000'000);
  const storage_id a2 = b.op("linear", {a1, s.w2}, act, true, 1'000'000);
  const storage_id g2 = b.op("loss_backward", {a2}, act, false, 1'000'000, phase::backward);
  s.gw2 = b.op("weight_grad", {a1, g2}, weight, false, 1'000'000, phase::backward);
  const storage_id g1 = b.op("input_grad", {g2, s.w2}, act, false, 1'000'000, phase::backward);
  b.free(g2);
  b.free(a2);
  const storage_id gw1 = b.op("weight_grad", {s.x, g1}, weight, false, 1'000'000, phase::backward);
  b.free(g1);
  b.free(a1);
  b.op("sgd", {s.w1, gw1, s.m1}, 0, false, 1'000'000);
  b.op("sgd", {s.w2, s.gw2, s.m2}, 0, false, 1'000'000);
  s.t = b.build();
  return s;
}

std::vector<storage_id> ids(const trace& t, std::vector<std::size_t> indices) {
  std::vector<storage_id> out;
  for (std::size_t i : indices) out.push_back(t.storages[i].id);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(LendPlan, LendsAfterTheLastUseInTheBackwardAndGivesBackAfterItsLastOp) {
  const step s = two_layer_step();
  const lend_plan p = lend_plan::build(s.t);
  ASSERT_EQ(p.lend_before.size(), s.t.events.size() + 1);
  // Unused in the backward: lent when it starts.
  EXPECT_EQ(ids(s.t, p.lend_before[2]), (std::vector<storage_id>{s.w1, s.m1, s.m2}));
  EXPECT_EQ(ids(s.t, p.lend_before[4]), (std::vector<storage_id>{s.gw2}));  // after the op that made it
  EXPECT_EQ(ids(s.t, p.lend_before[5]), (std::vector<storage_id>{s.w2}));   // after its last read
  // x is read by the last op, gw1 made by it, activations and their
  // gradients die in the window or right after it: none is lent.
  EXPECT_EQ(ids(s.t, p.give_back_before[8]), (std::vector<storage_id>{s.w1, s.w2, s.m1, s.m2, s.gw2}));
  for (std::size_t k : {0u, 1u, 3u, 6u, 7u, 8u, 9u, 10u, 11u, 12u}) EXPECT_TRUE(p.lend_before[k].empty()) << k;
  for (std::size_t k = 0; k < p.give_back_before.size(); ++k) {
    if (k != 8) {
      EXPECT_TRUE(p.give_back_before[k].empty()) << k;
    }
  }
}

TEST(LendPlan, AStepBoundaryEndsAWindowAndATraceWithoutBackwardLendsNothing) {
  trace_builder b;
  const storage_id w = b.pre_existing(weight);
  const storage_id a = b.op("linear", {w}, act, true, 1'000);
  b.free(a);
  const trace forward_only = b.build();
  const lend_plan none = lend_plan::build(forward_only);
  for (const auto& at : none.lend_before) EXPECT_TRUE(at.empty());

  const trace chain = linear_chain(4, act, 1'000, 2'000, weight);
  const lend_plan p = lend_plan::build(chain);
  std::size_t lent = 0, given = 0;
  for (const auto& at : p.lend_before) lent += at.size();
  for (const auto& at : p.give_back_before) given += at.size();
  EXPECT_EQ(lent, given);
  EXPECT_EQ(lent, 3u);  // the weights of layers 2..4; layer 1's is read by the last op
}

TEST(LeastBudget, IsWhatTheWorstOperatorHoldsWithAndWithoutLending) {
  const step s = two_layer_step();
  // Without lending: weights, momentum and x (33 MiB) stay; at weight_grad
  // (op 3) g2 is held too, a1 is its tracked input, gw2 its output.
  const least_budget plain = find_least_budget(s.t, nullptr);
  EXPECT_EQ(plain.bytes, 73 * MiB);
  EXPECT_EQ(plain.op, 3u);
  EXPECT_EQ(plain.held, 49 * MiB);
  // Lending: the backward needs at most 49 MiB; the forward's second linear
  // (weights, momentum, x, a1 and a2) becomes the worst.
  const lend_plan p = lend_plan::build(s.t);
  const least_budget lent = find_least_budget(s.t, &p);
  EXPECT_EQ(lent.bytes, 65 * MiB);
  EXPECT_EQ(lent.op, 1u);
  EXPECT_EQ(lent.held, 33 * MiB);
}

sim_options at(std::size_t budget, policy_kind policy, bool lend) {
  sim_options o;
  o.budget_bytes = budget;
  o.policy = policy;
  o.lend = lend;
  o.expandable_segments = true;
  return o;
}

TEST(SimulatorLending, ABudgetOnlyLendingCanMeetFitsWithEveryPolicy) {
  const step s = two_layer_step();
  const std::size_t budget = 70 * MiB;  // between 65 and 73
  for (policy_kind policy : all_policies()) {
    EXPECT_FALSE(simulate(s.t, at(budget, policy, false)).fits) << to_string(policy);
    const sim_report r = simulate(s.t, at(budget, policy, true));
    ASSERT_TRUE(r.fits) << to_string(policy) << ": " << r.failure;
    EXPECT_LE(r.peak_reserved, budget) << to_string(policy);
    EXPECT_GT(r.offloaded_bytes, 0u) << to_string(policy);
  }
}

TEST(SimulatorLending, NoPolicyFitsBelowTheLeastBudget) {
  for (const trace& t : {two_layer_step().t, linear_chain(8, act, 1'000'000, 2'000'000, weight)}) {
    for (bool lend : {false, true}) {
      const lend_plan p = lend_plan::build(t);
      const std::size_t least = find_least_budget(t, lend ? &p : nullptr).bytes;
      for (policy_kind policy : all_policies()) {
        EXPECT_FALSE(simulate(t, at(least - 1, policy, lend)).fits) << to_string(policy) << " lend " << lend;
      }
    }
  }
}

}  // namespace
}  // namespace tp::sim
