// memory_runtime with more than one thread around a recompute: the recompute
// runs without the runtime's lock (Note [Recompute outside the lock]), and
// what another thread does meanwhile is the program's own step (Note
// [Reruns run beside other threads]).

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>

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

// Note [Recompute outside the lock]: a recompute (Python's rerun, in torch)
// may wait for another thread that needs the runtime meanwhile, as one
// waits for Python's lock held by a thread that is untracking a tensor.
class waiting_binding final : public storage_binding {
 public:
  explicit waiting_binding(fake_binding& inner) : inner_(inner) {}
  void* device_ptr() const override { return inner_.device_ptr(); }
  void release_device() noexcept override { inner_.release_device(); }
  void* allocate_device(std::size_t bytes, stream_id stream) override {
    return inner_.allocate_device(bytes, stream);
  }
  void recompute() override {
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread([this, done] {
      (void)runtime->stats();  // takes the runtime's lock
      done->store(true);
    }).detach();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done->load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    other_thread_got_in = done->load();
    inner_.recompute();
  }
  memory_runtime* runtime = nullptr;
  bool other_thread_got_in = false;

 private:
  fake_binding& inner_;
};

TEST(RuntimeThreads, AnotherThreadUsesTheRuntimeWhileARecomputeRuns) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  fake_binding inner(rig, 1 * MiB, 5);
  waiting_binding b(inner);
  b.runtime = &rt;
  const tensor_id id = rt.track(b, inner.bytes(), rig.compute, 1000);
  ASSERT_EQ(rt.reclaim(1, rig.compute), inner.bytes());
  rt.access(id);
  EXPECT_TRUE(b.other_thread_got_in) << "the runtime held its lock through recompute()";
  EXPECT_TRUE(inner.verify());
  rt.check_invariants();
}

TEST(RuntimeThreads, ASecondThreadWaitsForTheRecomputeInFlight) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  fake_binding b(rig, 1 * MiB, 6);
  class slow_binding final : public storage_binding {
   public:
    explicit slow_binding(fake_binding& inner) : inner_(inner) {}
    void* device_ptr() const override { return inner_.device_ptr(); }
    void release_device() noexcept override { inner_.release_device(); }
    void* allocate_device(std::size_t bytes, stream_id stream) override {
    return inner_.allocate_device(bytes, stream);
  }
    void recompute() override {
      ++calls;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      inner_.recompute();
    }
    std::atomic<int> calls{0};

   private:
    fake_binding& inner_;
  } slow(b);
  const tensor_id id = rt.track(slow, b.bytes(), rig.compute, 1000);
  ASSERT_EQ(rt.reclaim(1, rig.compute), b.bytes());
  std::thread other([&] { rt.access(id); });
  rt.access(id);
  other.join();
  EXPECT_EQ(slow.calls.load(), 1);  // one recompute; the other thread waited for it
  EXPECT_TRUE(b.verify());
  rt.check_invariants();
}

TEST(RuntimeThreads, PinRecomputesWithoutTheLock) {
  // pin() is access() with a pin: it must not hold the lock a second time
  // around the recompute, or the rerun holds it (it took the lock itself
  // and then called access()).
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  fake_binding inner(rig, 1 * MiB, 7);
  waiting_binding b(inner);
  b.runtime = &rt;
  const tensor_id id = rt.track(b, inner.bytes(), rig.compute, 1000);
  ASSERT_EQ(rt.reclaim(1, rig.compute), inner.bytes());
  rt.pin(id);
  EXPECT_TRUE(b.other_thread_got_in) << "pin() held the runtime's lock through recompute()";
  EXPECT_EQ(rt.reclaim(1, rig.compute), 0u);  // pinned: never a victim
  rt.unpin(id);
  EXPECT_TRUE(inner.verify());
  rt.check_invariants();
}

// A rerun whose recompute lets another thread run its own step meanwhile,
// as a second training thread does while this one waits for Python's lock.
class concurrent_binding final : public storage_binding {
 public:
  explicit concurrent_binding(fake_binding& inner) : inner_(inner) {}
  void* device_ptr() const override { return inner_.device_ptr(); }
  void release_device() noexcept override { inner_.release_device(); }
  void* allocate_device(std::size_t bytes, stream_id stream) override {
    return inner_.allocate_device(bytes, stream);
  }
  void recompute() override {
    std::thread(meanwhile).join();
    rerun();
    inner_.recompute();
  }
  std::function<void()> meanwhile;  // on another thread, during the recompute
  std::function<void()> rerun;     // on this thread, inside the rerun

 private:
  fake_binding& inner_;
};

TEST(RuntimeThreads, AnotherThreadsEventsDuringARerunAreRecorded) {
  // Note [Reruns run beside other threads]: before, one runtime-wide count
  // of reruns in progress kept the other thread's track and access out of
  // the recorded step, so the next step's plan named the wrong tensors.
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, with_policy(policy_kind::dtr));
  fake_binding parent(rig, 1 * MiB, 8);
  fake_binding inner(rig, 1 * MiB, 9);
  fake_binding theirs(rig, 1 * MiB, 10);
  concurrent_binding b(inner);
  const tensor_id pid = rt.track(parent, parent.bytes(), rig.compute, 0, /*evictable=*/false);
  const tensor_id id = rt.track(b, inner.bytes(), rig.compute, 1000);
  tensor_id their_id{};
  b.meanwhile = [&] {
    their_id = rt.track(theirs, theirs.bytes(), rig.compute, 0);
    rt.access(their_id);
  };
  b.rerun = [&] { rt.access(pid); };  // the rerun reads its input: not recorded
  ASSERT_EQ(rt.reclaim(1, rig.compute), inner.bytes());
  const std::size_t before = rt.recorded_events();
  rt.access(id);
  // The other thread's track and access, then this access; not the rerun's.
  EXPECT_EQ(rt.recorded_events(), before + 3);
  EXPECT_TRUE(inner.verify());
  rt.untrack(their_id);
  rt.check_invariants();
}

}  // namespace
}  // namespace tp
