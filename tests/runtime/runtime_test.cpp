// memory_runtime and transfer_engine on the simulated device: round trips,
// ordering of copies against block reuse, taking back an offload, stalls and
// host-pool fallback.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/errors.hpp"
#include "runtime/runtime.hpp"
#include "runtime_test_support.hpp"

namespace tp {
namespace {

using namespace tp::testing;

memory_runtime::options with_policy(policy_kind k) {
  memory_runtime::options o;
  o.policy = k;
  return o;
}

TEST(Runtime, SwapRoundTripIsBitIdentical) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  fake_binding b(rig, 3 * MiB + 17, 1);
  const tensor_id id = rt.track(b, b.bytes(), rig.compute, 0);
  ASSERT_TRUE(rt.offload(id));
  rt.poll();
  EXPECT_EQ(rt.state(id), tensor_state::on_host);
  EXPECT_EQ(b.device_ptr(), nullptr);
  EXPECT_EQ(b.releases, 1);
  rt.access(id);
  EXPECT_EQ(rt.state(id), tensor_state::resident);
  EXPECT_TRUE(b.verify());
  const runtime_stats s = rt.stats();
  EXPECT_EQ(s.offloaded_bytes, b.bytes());
  EXPECT_EQ(s.prefetched_bytes, b.bytes());
  rt.check_invariants();
  rt.untrack(id);
  rt.poll();
  EXPECT_EQ(rig.host.stats().in_use_bytes, 0u);
}

TEST(Runtime, DropAndRecomputeRoundTripIsBitIdentical) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  fake_binding b(rig, 2 * MiB, 7);
  const tensor_id id = rt.track(b, b.bytes(), rig.compute, 1000);
  EXPECT_EQ(rt.reclaim(1, rig.compute), b.bytes());
  EXPECT_EQ(rt.state(id), tensor_state::dropped);
  EXPECT_EQ(b.device_ptr(), nullptr);
  rt.access(id);
  EXPECT_EQ(b.recomputes, 1);
  EXPECT_TRUE(b.verify());
  EXPECT_EQ(rt.stats().recomputes, 1u);
  rt.check_invariants();
}

TEST(Runtime, BlockIsNotReusedWhileItsOffloadCopyIsInFlight) {
  runtime_rig rig;
  memory_runtime::options o;
  o.offload_stream = rig.dev.create_stream();
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  fake_binding a(rig, 4 * MiB, 3);
  const auto begin = reinterpret_cast<std::uintptr_t>(a.device_ptr());
  const std::uintptr_t end = begin + a.bytes();
  const tensor_id id = rt.track(a, a.bytes(), rig.compute, 0);
  rig.dev.hold_stream(*o.offload_stream);
  ASSERT_TRUE(rt.offload(id));
  rt.poll();
  EXPECT_EQ(rt.state(id), tensor_state::offloading);
  // Ask for memory of every size; nothing handed out may overlap A, and
  // scribbling over it must not reach A's bytes.
  std::vector<void*> got;
  for (std::size_t bytes : {4 * MiB, 512 * KiB, 16 * MiB, 4 * MiB, 1 * MiB}) {
    void* p = rig.alloc.allocate(bytes, rig.compute);
    const auto pb = reinterpret_cast<std::uintptr_t>(p);
    EXPECT_TRUE(pb + bytes <= begin || pb >= end) << "overlaps the block being offloaded";
    std::memset(p, 0xAB, bytes);
    got.push_back(p);
  }
  rig.dev.release_stream(*o.offload_stream);
  rt.poll();
  EXPECT_EQ(rt.state(id), tensor_state::on_host);
  for (void* p : got) rig.alloc.deallocate(p);
  rt.access(id);
  EXPECT_TRUE(a.verify());
  rig.dev.destroy_stream(*o.offload_stream);
}

// Note [Offload ordering]: reclaim gives A's block back at once, guarded by
// its copy, and the allocator (not the runtime) waits before reusing it.
TEST(RuntimeThreads, ReclaimReleasesAHeldOffloadStreamOrderedAndTheAllocatorWaitsForTheCopy) {
  runtime_rig rig({.budget = 24 * MiB});
  memory_runtime::options o;
  o.offload_stream = rig.dev.create_stream();
  o.policy = policy_kind::lru;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  fake_binding a(rig, 12 * MiB, 5);  // its own 12 MiB segment
  fake_binding b(rig, 12 * MiB, 6);
  const tensor_id ida = rt.track(a, a.bytes(), rig.compute, 0);
  const tensor_id idb = rt.track(b, b.bytes(), rig.compute, 0, /*evictable=*/false);
  rig.dev.hold_stream(*o.offload_stream);
  std::atomic<bool> done{false};
  void* p = nullptr;
  std::thread t([&] {
    p = rig.alloc.allocate(12 * MiB, rig.compute);  // over budget: reclaim offloads A and waits
    std::memset(p, 0xCD, 12 * MiB);
    done = true;
  });
  // A's block is released, stream-ordered behind the held copy, and the
  // allocation still waits for that copy.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (a.device_ptr() != nullptr && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(a.device_ptr(), nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(done.load()) << "memory was handed out while its offload copy was held";
  rig.dev.release_stream(*o.offload_stream);
  t.join();
  EXPECT_EQ(rt.state(ida), tensor_state::on_host);
  rig.alloc.deallocate(p);
  rt.access(ida);
  EXPECT_TRUE(a.verify());
  EXPECT_TRUE(b.verify());
  rt.untrack(idb);
  rig.dev.destroy_stream(*o.offload_stream);
}

TEST(Runtime, EnsureResidentDuringOffloadTakesItBackWithoutWaiting) {
  runtime_rig rig;
  memory_runtime::options o;
  o.offload_stream = rig.dev.create_stream();
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  fake_binding a(rig, 1 * MiB, 9);
  void* const before = a.device_ptr();
  const tensor_id id = rt.track(a, a.bytes(), rig.compute, 0);
  rig.dev.hold_stream(*o.offload_stream);
  ASSERT_TRUE(rt.offload(id));
  rt.access(id);  // would deadlock if it waited for the held copy
  EXPECT_EQ(rt.state(id), tensor_state::resident);
  EXPECT_EQ(a.device_ptr(), before);
  EXPECT_EQ(a.releases, 0);
  EXPECT_EQ(rt.stats().cancelled_offloads, 1u);
  EXPECT_GT(rig.host.stats().in_use_bytes, 0u);  // freed only once the copy is done
  EXPECT_TRUE(a.verify());
  rig.dev.release_stream(*o.offload_stream);
  rt.poll();
  EXPECT_EQ(rig.host.stats().in_use_bytes, 0u);
  rt.check_invariants();
  rig.dev.destroy_stream(*o.offload_stream);
}

// Note [Prefetch ordering]: the compute stream waits on the copy, the host
// never does, and an unrelated held stream is not waited for either.
TEST(Runtime, RestoreNeverBlocksTheHostAndTheComputeStreamWaitsForTheCopy) {
  runtime_rig rig({.latency_ns = 1000});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  fake_binding a(rig, 256 * KiB, 11);
  const tensor_id id = rt.track(a, a.bytes(), rig.compute, 0);
  ASSERT_TRUE(rt.offload(id));
  rig.clk.advance(5000);
  rt.poll();
  ASSERT_EQ(rt.state(id), tensor_state::on_host);
  // Unrelated work held on another stream: a device-wide wait would hang.
  const stream_id other = rig.dev.create_stream();
  std::vector<std::byte> scratch(4096);
  void* dst = rig.alloc.allocate(4096, other);
  rig.dev.copy_async(dst, scratch.data(), scratch.size(), other);
  rig.dev.hold_stream(other);
  const std::int64_t t0 = rig.clk.now_ns();
  const std::uint64_t syncs = rig.dev.host_syncs();
  rt.access(id);
  EXPECT_EQ(rig.clk.now_ns(), t0);  // the host did not wait
  EXPECT_EQ(rig.dev.host_syncs(), syncs);
  const runtime_stats s = rt.stats();
  EXPECT_EQ(s.stalls, 1u);
  EXPECT_EQ(s.late_copies, 1u);
  EXPECT_EQ(s.stall_ns, 0);
  EXPECT_TRUE(a.verify());  // synchronizes the compute stream: it waited on the copy
  EXPECT_EQ(rig.clk.now_ns() - t0, 1000);  // the copy's modelled time, nothing more
  EXPECT_EQ(rig.dev.pending_ops(other), 1u);
  rig.dev.release_stream(other);
  rig.dev.synchronize(other);
  rig.alloc.deallocate(dst);
  rig.dev.destroy_stream(other);
}

TEST(Runtime, HostPoolFullFallsBackToRecomputeOrKeepsResidentAndSaysSoOnce) {
  runtime_rig rig({.host_budget = 64 * KiB});
  std::vector<std::string> notices;
  memory_runtime::options o;
  o.policy = policy_kind::lru;
  o.log = [&](std::string_view s) { notices.emplace_back(s); };
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  fake_binding keep(rig, 1 * MiB, 1);
  fake_binding drop(rig, 1 * MiB, 2);
  const tensor_id k = rt.track(keep, keep.bytes(), rig.compute, 0);
  const tensor_id d = rt.track(drop, drop.bytes(), rig.compute, 500);
  const std::size_t freed = rt.reclaim(2 * MiB, rig.compute);
  EXPECT_EQ(freed, drop.bytes());
  EXPECT_EQ(rt.state(k), tensor_state::resident);
  EXPECT_EQ(rt.state(d), tensor_state::dropped);
  EXPECT_EQ(notices.size(), 1u);
  rt.reclaim(2 * MiB, rig.compute);
  EXPECT_EQ(notices.size(), 1u);
  EXPECT_GE(rt.stats().host_fallbacks, 1u);
  rt.access(d);
  EXPECT_TRUE(drop.verify());
  EXPECT_TRUE(keep.verify());
  rt.check_invariants();
}

TEST(Runtime, StorageHeldElsewhereIsSkippedAndStaysACandidate) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::lru));
  fake_binding held(rig, 1 * MiB, 1);
  fake_binding free_one(rig, 1 * MiB, 2);
  held.shared = true;
  const tensor_id h = rt.track(held, held.bytes(), rig.compute, 0);  // least recently used
  const tensor_id f = rt.track(free_one, free_one.bytes(), rig.compute, 0);
  EXPECT_FALSE(rt.offload(h));
  EXPECT_EQ(rt.reclaim(1, rig.compute), free_one.bytes());
  EXPECT_EQ(rt.state(h), tensor_state::resident);
  EXPECT_EQ(rt.state(f), tensor_state::on_host);
  EXPECT_EQ(held.releases, 0);
  EXPECT_EQ(rt.stats().shared_skips, 1u);
  rt.check_invariants();  // h is a candidate again
  held.shared = false;  // the other holder let go
  EXPECT_EQ(rt.reclaim(1, rig.compute), held.bytes());
  EXPECT_EQ(rt.state(h), tensor_state::on_host);
  rt.access(h);
  EXPECT_TRUE(held.verify());
}

TEST(Runtime, RecomputeCostSetLaterMakesATensorDroppable) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  fake_binding b(rig, 1 * MiB, 3);
  const tensor_id id = rt.track(b, b.bytes(), rig.compute, 0);
  rt.set_recompute_cost(id, 1000);
  EXPECT_EQ(rt.reclaim(1, rig.compute), b.bytes());
  EXPECT_EQ(rt.state(id), tensor_state::dropped);
  rt.access(id);
  EXPECT_EQ(b.recomputes, 1);
  EXPECT_TRUE(b.verify());
}

TEST(Runtime, AStorageChangedSinceItsRecomputeWasSetIsSwappedNotDropped) {
  // Note [Recompute reproduces one version] in hooks/budget/saved_storage.hpp.
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  fake_binding b(rig, 1 * MiB, 3);
  const tensor_id id = rt.track(b, b.bytes(), rig.compute, 1000);
  b.stale = true;
  EXPECT_EQ(rt.reclaim(1, rig.compute), b.bytes());
  EXPECT_EQ(rt.state(id), tensor_state::on_host);
  rt.access(id);
  EXPECT_EQ(b.recomputes, 0);
  EXPECT_TRUE(b.verify());
  rt.check_invariants();
}

TEST(Runtime, AStaleStorageStaysWhenTheHostPoolIsFull) {
  runtime_rig rig({.host_budget = 1});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  fake_binding b(rig, 1 * MiB, 3);
  const tensor_id id = rt.track(b, b.bytes(), rig.compute, 1000);
  b.stale = true;
  EXPECT_EQ(rt.reclaim(1, rig.compute), 0u);
  EXPECT_EQ(rt.state(id), tensor_state::resident);
  EXPECT_NE(rt.describe().find("could neither be swapped"), std::string::npos) << rt.describe();
  rt.check_invariants();
}

// Note [DTR is recompute only]: dtr drops what it can drop first, whatever
// the host pool holds; only what cannot be recomputed is swapped, and a full
// pool keeps it resident.
TEST(Runtime, DtrDropsFirstAndAFullHostPoolOnlyKeepsWhatCannotBeDropped) {
  for (const std::size_t host : {std::size_t{1}, std::size_t{64} * MiB}) {
    runtime_rig rig({.host_budget = host});
    memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
    fake_binding lent(rig, 1 * MiB, 3);
    const tensor_id a = rt.track(lent, lent.bytes(), rig.compute, 0);  // never recomputable
    rig.clk.advance(100);
    fake_binding act(rig, 1 * MiB, 4);
    const tensor_id b = rt.track(act, act.bytes(), rig.compute, 1000);
    rig.clk.advance(100);
    EXPECT_EQ(rt.reclaim(1, rig.compute), act.bytes()) << host;
    EXPECT_EQ(rt.state(b), tensor_state::dropped) << host;
    EXPECT_EQ(rt.state(a), tensor_state::resident) << host;
    const bool room = host > 1;
    EXPECT_EQ(rt.reclaim(1, rig.compute), room ? lent.bytes() : 0u) << host;
    EXPECT_EQ(rt.state(a), room ? tensor_state::on_host : tensor_state::resident) << host;
    rt.access(b);
    rt.access(a);
    EXPECT_TRUE(act.verify());
    EXPECT_TRUE(lent.verify());
    rt.check_invariants();
  }
}

// Note [DTR's staleness]: a tensor's staleness runs from when its last use
// asked for it, not from when its recompute for that use was done.
TEST(Runtime, DtrStalenessRunsFromTheRequestNotTheEndOfTheRecompute) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  fake_binding a(rig, 1 * MiB, 3);
  a.recompute_ns = 5000;
  const tensor_id ida = rt.track(a, a.bytes(), rig.compute, 1000);
  rig.clk.advance(100);
  EXPECT_EQ(rt.reclaim(1, rig.compute), a.bytes());
  ASSERT_EQ(rt.state(ida), tensor_state::dropped);
  rig.clk.advance(100);
  fake_binding b(rig, 1 * MiB, 4);
  const tensor_id idb = rt.track(b, b.bytes(), rig.compute, 2000);  // at 200
  rig.clk.advance(100);
  rt.access(ida);  // asked for at 300, resident at 5300
  EXPECT_EQ(rig.clk.now_ns(), 5300);
  // a: 1000 / (5000 + 1); b: 2000 / (5100 + 1). Stamped once resident, a
  // would score 1000 / 1 and b would go.
  EXPECT_EQ(rt.reclaim(1, rig.compute), a.bytes());
  EXPECT_EQ(rt.state(ida), tensor_state::dropped);
  EXPECT_EQ(rt.state(idb), tensor_state::resident);
  rt.check_invariants();
}

// The copy still reads the storage the binding frees after untrack: the
// allocator keeps it until the copy is done, and the host never waits.
TEST(Runtime, UntrackWhileOffloadingGuardsTheStorageWithoutWaiting) {
  runtime_rig rig({.latency_ns = 2000});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  auto a = std::make_unique<fake_binding>(rig, 64 * KiB, 4);
  void* const block = a->device_ptr();
  const tensor_id id = rt.track(*a, a->bytes(), rig.compute, 0);
  ASSERT_TRUE(rt.offload(id));
  const std::uint64_t syncs = rig.dev.host_syncs();
  rt.untrack(id);
  EXPECT_EQ(rig.clk.now_ns(), 0);
  a.reset();  // frees the device storage while the copy still reads it
  void* other = rig.alloc.allocate(64 * KiB, rig.compute);
  EXPECT_NE(other, block) << "a block handed out while a copy still read it";
  EXPECT_EQ(rig.dev.host_syncs(), syncs);
  rig.clk.advance(2000);
  rt.poll();
  EXPECT_EQ(rig.host.stats().in_use_bytes, 0u);
  EXPECT_EQ(rt.stats().tracked, 0u);
  rig.alloc.deallocate(other);
}

TEST(Runtime, UnknownIdIsRejected) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  EXPECT_THROW(rt.access(tensor_id{42}), invalid_argument);
}

}  // namespace
}  // namespace tp
