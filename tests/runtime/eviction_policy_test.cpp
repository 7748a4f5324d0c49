// Each policy on scripted candidates and recorded steps, with a fake clock.

#include <gtest/gtest.h>

#include <deque>
#include <random>

#include "core/errors.hpp"
#include "runtime/capuchin_policy.hpp"
#include "runtime/dtr_policy.hpp"
#include "runtime/hybrid_policy.hpp"
#include "runtime/lru_policy.hpp"

namespace tp {
namespace {

/// A binding with an address and no memory: policies read device_ptr only.
class address_binding final : public storage_binding {
 public:
  explicit address_binding(std::uintptr_t a) : address_(a) {}
  void* device_ptr() const override { return reinterpret_cast<void*>(address_); }
  void release_device() noexcept override {}
  void* allocate_device(std::size_t) override { return nullptr; }
  void recompute() override {}

 private:
  std::uintptr_t address_;
};

struct scripted {
  std::deque<address_binding> bindings;
  std::deque<managed_tensor> tensors;
  candidate_set set;
  std::mt19937_64 rng{1};

  managed_tensor& add(std::size_t bytes, std::int64_t last_access, std::int64_t cost,
                      std::uintptr_t address = 0x10000) {
    bindings.emplace_back(address);
    managed_tensor& t = tensors.emplace_back();
    t.id = tensor_id{tensors.size()};
    t.binding = &bindings.back();
    t.bytes = bytes;
    t.last_access_ns = last_access;
    t.recompute_cost_ns = cost;
    t.ordinal = tensors.size() - 1;
    set.add(t);
    return t;
  }
  policy_context ctx(std::int64_t now, const step_record* prev = nullptr, std::int64_t step_time = 0,
                     std::uintptr_t begin = 0, std::uintptr_t end = 0) {
    bandwidth_model bw{.bytes_per_s = 1e9, .latency_ns = 0};  // 1 byte per ns
    return policy_context{set, now, 1, prev, step_time, bw, rng, begin, end};
  }
};

TEST(LruPolicy, EvictsLeastRecentlyUsedFirst) {
  scripted s;
  managed_tensor& a = s.add(100, 0, 0);
  managed_tensor& b = s.add(100, 1, 0);
  managed_tensor& c = s.add(100, 2, 0);
  lru_policy p;
  EXPECT_EQ(p.choose(s.ctx(10))->victim, &a);
  s.set.touch(a);
  EXPECT_EQ(p.choose(s.ctx(10))->victim, &b);
  s.set.remove(b);
  EXPECT_EQ(p.choose(s.ctx(10))->victim, &c);
  EXPECT_EQ(p.choose(s.ctx(10))->action, eviction_action::swap);
  s.set.remove(a);
  s.set.remove(c);
  EXPECT_FALSE(p.choose(s.ctx(10)).has_value());
}

TEST(DtrPolicy, PicksTheLowestCostOverBytesTimesStaleness) {
  scripted s;
  s.add(100, 90, 1000);                        // 1000 / (100 * 11)  = 0.91
  managed_tensor& cheap = s.add(400, 50, 800);  // 800 / (400 * 51)  = 0.039
  s.add(400, 0, 100000);                        // 100000 / (400*101) = 2.5
  dtr_policy p(32);
  const auto c = p.choose(s.ctx(100));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->victim, &cheap);
  EXPECT_EQ(c->action, eviction_action::drop);
}

TEST(DtrPolicy, SamplesOnlyKCandidates) {
  scripted s;
  for (int i = 0; i < 10000; ++i) s.add(100, i, 1000);
  dtr_policy p(8);
  // The oldest tensor is the global minimum; 8 samples rarely find it, but
  // always find something far better than the median.
  const auto c = p.choose(s.ctx(10000));
  ASSERT_TRUE(c);
  EXPECT_LT(c->victim->last_access_ns, 9000);
}

TEST(DtrPolicy, AdjacentVictimWinsATie) {
  scripted s;
  s.add(256, 0, 1000, 0x1000);
  managed_tensor& next_door = s.add(256, 0, 1000, 0x2100);
  dtr_policy p(32);
  const auto c = p.choose(s.ctx(100, nullptr, 0, 0x2000, 0x2100));
  EXPECT_EQ(c->victim, &next_door);
}

// A step where tensor 0 is used at 0 and 10'000, tensor 1 at 100 and 300.
step_record two_tensor_step() {
  step_record r;
  r.tensors = {{1000, 500, true, {0, 10'000}}, {1000, 500, true, {100, 300}}};
  return r;
}

TEST(CapuchinPolicy, SwapsWhenTheGapHidesTheCopyAndDropsWhenItDoesNot) {
  scripted s;
  managed_tensor& far = s.add(1000, 0, 500);
  managed_tensor& near = s.add(1000, 100, 500);
  const step_record prev = two_tensor_step();
  capuchin_policy p(32);
  auto ctx = s.ctx(150, &prev, 150);
  // Round trip of 1000 bytes = 2000 ns. far's next use is 9850 ns away.
  const auto c = p.choose(ctx);
  EXPECT_EQ(c->victim, &far);
  EXPECT_EQ(c->action, eviction_action::swap);
  s.set.remove(far);
  const auto d = p.choose(ctx);
  EXPECT_EQ(d->victim, &near);  // next use 150 ns away: the copy cannot hide
  EXPECT_EQ(d->action, eviction_action::drop);
  near.recompute_cost_ns = 0;  // not recomputable: swap even so
  EXPECT_EQ(p.choose(ctx)->action, eviction_action::swap);
}

TEST(CapuchinPolicy, WithoutARecordedStepComparesCosts) {
  scripted s;
  managed_tensor& t = s.add(1000, 0, 5000);  // recompute 5000 ns > round trip 2000 ns
  capuchin_policy p;
  EXPECT_EQ(p.choose(s.ctx(10))->action, eviction_action::swap);
  t.recompute_cost_ns = 100;
  EXPECT_EQ(p.choose(s.ctx(10))->action, eviction_action::drop);
}

// n cheap, recomputable tensors tracked in forward, used in reverse.
step_record chain_step(int n, std::size_t bytes) {
  step_record r;
  std::int64_t t = 0;
  for (int i = 0; i < n; ++i) {
    r.tensors.push_back({bytes, 10, true, {t}});
    r.events.push_back({step_event_kind::track, std::size_t(i), t});
    t += 10;
  }
  for (int i = n - 1; i >= 0; --i) {
    r.tensors[std::size_t(i)].uses_ns.push_back(t);
    r.events.push_back({step_event_kind::access, std::size_t(i), t});
    t += 10;
  }
  return r;
}

TEST(HybridPolicy, PlanBreaksRecomputeChainsUntilThePeakFitsTheBudget) {
  const step_record r = chain_step(10, 1000);
  planning_inputs in;
  in.bandwidth = {.bytes_per_s = 1e9, .latency_ns = 0};
  in.unmanaged_bytes = 500;
  // Unconstrained, all drop: one chain of 10000 bytes.
  const hybrid_plan loose = hybrid_policy::make_plan(r, in);
  EXPECT_EQ(loose.planned_peak_bytes, 10'500u);
  for (eviction_action a : loose.actions) EXPECT_EQ(a, eviction_action::drop);
  in.budget_bytes = 3'600;
  const hybrid_plan tight = hybrid_policy::make_plan(r, in);
  EXPECT_TRUE(tight.fits);
  EXPECT_LE(tight.planned_peak_bytes, 3'600u);
  int swaps = 0;
  for (eviction_action a : tight.actions) swaps += a == eviction_action::swap;
  EXPECT_GT(swaps, 0);
  EXPECT_LT(swaps, 10);
  EXPECT_GT(tight.added_time_ns, loose.added_time_ns);
}

TEST(HybridPolicy, ReportsAPlanThatCannotFit) {
  const step_record r = chain_step(4, 1000);
  planning_inputs in;
  in.budget_bytes = 900;  // below one tensor
  EXPECT_FALSE(hybrid_policy::make_plan(r, in).fits);
}

TEST(HybridPolicy, WithoutARecordedStepBehavesLikeCapuchin) {
  scripted s;
  s.add(1000, 0, 5000);
  s.add(1000, 5, 100);
  hybrid_policy h;
  capuchin_policy c;
  for (int i = 0; i < 2; ++i) {
    const auto a = h.choose(s.ctx(10));
    const auto b = c.choose(s.ctx(10));
    EXPECT_EQ(a->victim, b->victim);
    EXPECT_EQ(a->action, b->action);
    s.set.remove(*a->victim);
  }
}

TEST(EvictionPolicy, ParsesNamesAndRejectsUnknownOnes) {
  EXPECT_EQ(parse_policy_kind("dtr"), policy_kind::dtr);
  EXPECT_EQ(make_policy(policy_kind::hybrid)->kind(), policy_kind::hybrid);
  try {
    parse_policy_kind("fifo");
    FAIL();
  } catch (const config_error& e) {
    EXPECT_NE(std::string(e.what()).find("lru, dtr, capuchin, hybrid"), std::string::npos);
  }
}

}  // namespace
}  // namespace tp
