// memory_runtime's events (Note [Runtime events]): which ones each transition
// sends, in order, with the tensor, block, bytes, stream and detail.

#include <gtest/gtest.h>

#include <vector>

#include "runtime/runtime.hpp"
#include "runtime/runtime_observer.hpp"
#include "runtime_test_support.hpp"

namespace tp {
namespace {

using namespace tp::testing;
using kind = runtime_event_kind;

class recording_observer final : public runtime_observer {
 public:
  std::vector<runtime_event> events;
  void on_event(const runtime_event& e) noexcept override { events.push_back(e); }
  std::vector<kind> kinds() const {
    std::vector<kind> out;
    for (const auto& e : events) out.push_back(e.kind);
    return out;
  }
};

memory_runtime::options with_policy(policy_kind k) {
  memory_runtime::options o;
  o.policy = k;
  return o;
}

TEST(RuntimeObserver, SwapRoundTripSendsOffloadPrefetchAndTheStall) {
  runtime_rig rig({.latency_ns = 1000});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  recording_observer obs;
  rt.set_observer(&obs);
  fake_binding b(rig, 256 * KiB, 3);
  const auto block = reinterpret_cast<std::uintptr_t>(b.device_ptr());
  const tensor_id id = rt.track(b, b.bytes(), rig.compute, 0);
  ASSERT_TRUE(rt.offload(id));
  rig.clk.advance(5000);
  rt.poll();
  rt.access(id);  // the copy back takes 1000 ns of the device's model: late, a stall
  EXPECT_EQ(rig.clk.now_ns(), 5000);  // the compute stream waits; the host did not
  rig.clk.advance(1000);
  rt.poll();  // sees the copy done: Note [Late copies] in transfer_engine.hpp
  rt.step();
  ASSERT_EQ(obs.kinds(), (std::vector<kind>{kind::offload_begin, kind::offload_end, kind::prefetch_begin,
                                            kind::prefetch_end, kind::stall, kind::step}));
  const runtime_event& begin = obs.events[0];
  EXPECT_EQ(begin.tensor, id);
  EXPECT_EQ(begin.address, block);
  EXPECT_EQ(begin.bytes, b.bytes());
  EXPECT_NE(begin.stream, rig.compute);  // the offload stream
  EXPECT_GE(begin.host_bytes, static_cast<std::int64_t>(b.bytes()));
  EXPECT_EQ(obs.events[1].address, block);  // reported before the storage went back
  EXPECT_EQ(obs.events[1].detail, 0);
  EXPECT_EQ(obs.events[2].address, reinterpret_cast<std::uintptr_t>(b.device_ptr()));
  EXPECT_EQ(obs.events[4].detail, 1000);  // the device's wait, from the access to the poll
  EXPECT_EQ(obs.events[4].tensor, id);
  EXPECT_EQ(obs.events[4].stream, rig.compute);
  EXPECT_EQ(obs.events[5].detail, 0);  // the first step's index
  EXPECT_EQ(obs.events[5].tensor, tensor_id{});
  rt.set_observer(nullptr);
  rt.untrack(id);
}

TEST(RuntimeObserver, DropThenRecomputeSendsEvictionRecomputeAndStall) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  recording_observer obs;
  rt.set_observer(&obs);
  fake_binding b(rig, 2 * MiB, 7);
  const auto block = reinterpret_cast<std::uintptr_t>(b.device_ptr());
  const tensor_id id = rt.track(b, b.bytes(), rig.compute, 1000);
  ASSERT_EQ(rt.reclaim(1, rig.compute), b.bytes());
  rt.access(id);
  ASSERT_EQ(obs.kinds(), (std::vector<kind>{kind::eviction, kind::recompute_begin, kind::recompute_end, kind::stall}));
  EXPECT_EQ(obs.events[0].detail, 1);  // dropped
  EXPECT_EQ(obs.events[0].address, block);
  EXPECT_EQ(obs.events[1].address, 0u);  // no storage until the recompute
  EXPECT_EQ(obs.events[2].address, reinterpret_cast<std::uintptr_t>(b.device_ptr()));
  EXPECT_EQ(obs.events[2].bytes, b.bytes());
  rt.set_observer(nullptr);
}

TEST(RuntimeObserver, ReclaimByOffloadSendsEvictionAfterOffloadBegin) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::lru));
  recording_observer obs;
  rt.set_observer(&obs);
  fake_binding b(rig, 1 * MiB, 5);
  const tensor_id id = rt.track(b, b.bytes(), rig.compute, 0);
  ASSERT_EQ(rt.reclaim(1, rig.compute), b.bytes());
  ASSERT_EQ(obs.kinds(), (std::vector<kind>{kind::offload_begin, kind::eviction, kind::offload_end}));
  EXPECT_EQ(obs.events[1].detail, 0);  // offloaded, not dropped
  EXPECT_EQ(obs.events[1].tensor, id);
  rt.set_observer(nullptr);
}

TEST(RuntimeObserver, AnOffloadTakenBackOrUntrackedStillEnds) {
  runtime_rig rig({.latency_ns = 1000});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  recording_observer obs;
  rt.set_observer(&obs);
  fake_binding a(rig, 64 * KiB, 1);
  fake_binding c(rig, 64 * KiB, 2);
  const tensor_id ia = rt.track(a, a.bytes(), rig.compute, 0);
  const tensor_id ic = rt.track(c, c.bytes(), rig.compute, 0);
  ASSERT_TRUE(rt.offload(ia));
  rt.ensure_resident(ia, rig.compute);  // still copying: taken back
  ASSERT_TRUE(rt.offload(ic));
  rt.untrack(ic);  // in flight
  ASSERT_EQ(obs.kinds(), (std::vector<kind>{kind::offload_begin, kind::offload_end, kind::offload_begin,
                                            kind::offload_end}));
  EXPECT_EQ(obs.events[1].detail, 1);
  EXPECT_EQ(obs.events[1].tensor, ia);
  EXPECT_EQ(obs.events[3].detail, 1);
  EXPECT_EQ(obs.events[3].tensor, ic);
  rt.set_observer(nullptr);
  ASSERT_TRUE(rt.offload(ia));
  EXPECT_EQ(obs.events.size(), 4u);  // unregistered: nothing more
  rt.untrack(ia);
}

}  // namespace
}  // namespace tp
