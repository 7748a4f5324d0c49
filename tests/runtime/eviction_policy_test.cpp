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
  void* allocate_device(std::size_t, stream_id) override { return nullptr; }
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
    t.last_request_ns = last_access;
    t.recompute_cost_ns = cost;
    t.ordinal = tensors.size() - 1;
    set.add(t);
    return t;
  }
  policy_context ctx(std::int64_t now, const step_record* prev = nullptr, std::int64_t step_time = 0,
                     std::uintptr_t begin = 0, std::uintptr_t end = 0) {
    const copy_cost_model copies{{.bytes_per_s = 1e9, .latency_ns = 0}};  // 1 byte per ns
    return policy_context{set, now, 1, prev, step_time, copies, rng, begin, end};
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
  dtr_policy p;
  const auto c = p.choose(s.ctx(100));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->victim, &cheap);
  EXPECT_EQ(c->action, eviction_action::drop);
}

// As DTR's simulator: every candidate is scored, so the global minimum is
// found however many there are (a sample of 32 would miss it almost always).
TEST(DtrPolicy, ScoresEveryCandidate) {
  scripted s;
  for (int i = 1; i <= 10000; ++i) s.add(100, i, 1000);
  managed_tensor& oldest = s.add(100, 0, 1000);
  dtr_policy p;
  const auto c = p.choose(s.ctx(10000));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->victim, &oldest);
}

// Note [DTR's staleness]: from the last request, as DTR's simulator stamps
// it, not from the end of the restore that request waited for.
TEST(DtrPolicy, StalenessRunsFromTheLastRequest) {
  scripted s;
  managed_tensor& waited = s.add(100, 150, 1000);  // used at 150 after a restore asked for at 10
  waited.last_request_ns = 10;
  s.add(100, 50, 1000);
  dtr_policy p;
  const auto c = p.choose(s.ctx(200));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->victim, &waited);
}

TEST(DtrPolicy, AdjacentVictimWinsATie) {
  scripted s;
  s.add(256, 0, 1000, 0x1000);
  managed_tensor& next_door = s.add(256, 0, 1000, 0x2100);
  dtr_policy p;
  const auto c = p.choose(s.ctx(100, nullptr, 0, 0x2000, 0x2100));
  EXPECT_EQ(c->victim, &next_door);
}

// A step where tensor 0 is used at 0 and 10'000, tensor 1 at 100 and 300.
step_record two_tensor_step() {
  step_record r;
  r.tensors.resize(2);
  r.tensors[0] = {1000, 500, true, {0, 10'000}, {}, {}};
  r.tensors[1] = {1000, 500, true, {100, 300}, {}, {}};
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

// Note [Hybrid fallback]: a swap whose prefetch hides under the gap to the
// next use costs its offload (the reclaim waits for it), and beats a dearer
// recompute; one that cannot hide loses to a cheap recompute, and so does a
// far one whose recompute costs less than its offload.
TEST(HybridPolicy, FallbackSwapsWhatHidesAndDropsWhatIsCheaperToRecompute) {
  scripted s;
  managed_tensor& far = s.add(1000, 0, 5000);
  managed_tensor& near = s.add(1000, 100, 500);
  const step_record prev = two_tensor_step();
  auto ctx = s.ctx(150, &prev, 150);
  // 1000 ns each way; far's next use is 9850 ns away, near's 150 ns.
  EXPECT_EQ(hybrid_policy::price(far, ctx).first, eviction_action::swap);
  EXPECT_DOUBLE_EQ(hybrid_policy::price(far, ctx).second, 1000 + 2000 / 16.0);  // the offload alone is exposed
  EXPECT_EQ(hybrid_policy::price(near, ctx).first, eviction_action::drop);
  far.recompute_cost_ns = 500;  // cheaper than waiting for its offload
  EXPECT_EQ(hybrid_policy::price(far, ctx).first, eviction_action::drop);
  far.recompute_cost_ns = 5000;
  near.recompute_cost_ns = 0;
  EXPECT_EQ(hybrid_policy::price(near, ctx).first, eviction_action::swap);
  hybrid_policy h;
  const auto c = h.choose(ctx);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->victim, &far);  // oldest, and free to swap
  EXPECT_EQ(c->action, eviction_action::swap);
}

// Note [Copy cost model]: the same tensor, the same configured 1 GB/s; once
// its copies are timed 100x slower, a swap no longer hides under the gap to
// its next use (hybrid) nor beats its recompute (capuchin without a step).
TEST(HybridPolicy, SwapsOrDropsAsTheCopiesWereTimed) {
  scripted s;
  managed_tensor& far = s.add(1000, 0, 5000);
  s.add(1000, 100, 500);
  const step_record prev = two_tensor_step();
  policy_context ctx = s.ctx(150, &prev, 150);
  EXPECT_EQ(hybrid_policy::price(far, ctx).first, eviction_action::swap);
  for (const copy_direction d : {copy_direction::to_host, copy_direction::to_device}) ctx.copies.observe(d, 1000, 100'000);
  EXPECT_EQ(hybrid_policy::price(far, ctx).first, eviction_action::drop);
}

TEST(CapuchinPolicy, SwapsOrDropsAsTheCopiesWereTimed) {
  scripted s;
  managed_tensor& t = s.add(1000, 0, 5000);  // recompute 5000 ns > round trip 2000 ns configured
  policy_context ctx = s.ctx(10);
  EXPECT_EQ(capuchin_policy::action_for(t, ctx), eviction_action::swap);
  ctx.copies.observe(copy_direction::to_device, 1000, 4'000);  // timed: round trip 5000 ns
  EXPECT_EQ(capuchin_policy::action_for(t, ctx), eviction_action::swap);
  ctx.copies.observe(copy_direction::to_host, 1000, 4'000);  // 8000 ns
  EXPECT_EQ(capuchin_policy::action_for(t, ctx), eviction_action::drop);
}

// Note [Evicted neighbourhood]: DTR prices a drop by the evicted tensors its
// rerun would also need, so of two equal tensors it drops the one whose
// neighbours are all resident.
TEST(DtrPolicy, PricesTheEvictedNeighbourhoodAndDropsWhileItCan) {
  scripted s;
  managed_tensor& a = s.add(1000, 0, 100);
  managed_tensor& b = s.add(1000, 0, 100);
  managed_tensor& c = s.add(1000, 0, 100);
  managed_tensor& parent_of_a = s.add(1000, 0, 5000);
  const tensor_id pa[] = {parent_of_a.id};
  lineage g;
  g.add(parent_of_a.id, 5000, {});
  g.add(a.id, 100, pa);
  g.add(b.id, 100, {});
  g.add(c.id, 100, {});
  g.evicted(parent_of_a.id);  // dropped: a's rerun would rerun it too
  s.set.remove(parent_of_a);
  auto ctx = s.ctx(100);
  ctx.graph = &g;
  EXPECT_GT(dtr_policy::score(a, ctx), dtr_policy::score(b, ctx));
  dtr_policy p;
  for (int i = 0; i < 2; ++i) {
    const auto v = p.choose(ctx);
    ASSERT_TRUE(v);
    EXPECT_NE(v->victim, &a);
    EXPECT_EQ(v->action, eviction_action::drop);
    s.set.remove(*v->victim);
  }
  EXPECT_EQ(p.choose(ctx)->victim, &a);
  s.set.remove(a);
  // Nothing recomputable left (a lent parameter, say): the stalest is swapped
  // (Note [DTR is recompute only]).
  managed_tensor& fresh = s.add(1000, 50, 0);
  managed_tensor& stale = s.add(1000, 10, 0);
  const auto last = p.choose(ctx);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->victim, &stale);
  EXPECT_EQ(last->action, eviction_action::swap);
  s.set.remove(stale);
  s.set.remove(fresh);
  EXPECT_FALSE(p.choose(ctx).has_value()) << "no candidate";
}

/// A binding whose storage changed since it was saved: it cannot be rerun.
class unrepeatable_binding final : public storage_binding {
 public:
  void* device_ptr() const override { return nullptr; }
  void release_device() noexcept override {}
  void* allocate_device(std::size_t, stream_id) override { return nullptr; }
  void recompute() override {}
  bool can_recompute() const noexcept override { return false; }
};

// Note [DTR is recompute only]: while anything can be dropped, what cannot
// (not recomputable, or changed since its recompute was set up) is no
// victim, however stale or large; the drop is found behind a thousand such
// candidates, where a sample of 32 would miss it.
TEST(DtrPolicy, DropsWhileAnythingCanBeDropped) {
  scripted s;
  for (int i = 0; i < 1000; ++i) s.add(1000, 0, 0);  // lent, say: not recomputable
  unrepeatable_binding changed;
  managed_tensor& rewritten = s.add(1 << 20, 0, 100);
  rewritten.binding = &changed;
  managed_tensor& only = s.add(10, 99, 1'000'000);  // the dearest score, and the only droppable one
  dtr_policy p;
  EXPECT_TRUE(p.recompute_only());
  for (int i = 0; i < 5; ++i) {
    const auto c = p.choose(s.ctx(100));
    ASSERT_TRUE(c);
    EXPECT_EQ(c->victim, &only);
    EXPECT_EQ(c->action, eviction_action::drop);
  }
  s.set.remove(only);
  const auto c = p.choose(s.ctx(100));
  ASSERT_TRUE(c);
  EXPECT_EQ(c->action, eviction_action::swap);
  EXPECT_FALSE(make_policy(policy_kind::hybrid)->recompute_only());
  EXPECT_FALSE(make_policy(policy_kind::lru)->recompute_only());
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
