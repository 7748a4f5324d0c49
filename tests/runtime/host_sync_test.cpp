// Issue 16: the restore path never blocks the host. A training loop on the
// simulated device, with real bytes, runs under a budget that forces swaps;
// in the steady state, where every prefetch reaches the device before the
// operator that reads it, a step makes no host synchronisation at all
// (simulated_device::host_syncs), and every byte comes back as it left.

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "runtime/runtime.hpp"
#include "runtime_test_support.hpp"

namespace tp {
namespace {

using tp::testing::MiB;
using tp::testing::runtime_rig;

// A storage whose contents are written and read on the compute stream, as a
// kernel does: the producer is a copy from a host pattern, the consumer a
// copy into a host buffer checked after the step. Nothing touches device
// memory from the host, so nothing needs the host to wait.
class stream_binding final : public storage_binding {
 public:
  stream_binding(runtime_rig& rig, std::size_t bytes, std::uint64_t seed) : rig_(rig), pattern_(bytes), seen_(bytes) {
    for (std::size_t i = 0; i < bytes; ++i) pattern_[i] = static_cast<std::byte>((seed * 131 + i * 7) & 0xff);
    produce();
  }
  ~stream_binding() override {
    if (ptr_ != nullptr) rig_.alloc.deallocate(ptr_);
  }
  void* device_ptr() const override { return ptr_; }
  void release_device() noexcept override {
    rig_.alloc.deallocate(ptr_);
    ptr_ = nullptr;
  }
  void* allocate_device(std::size_t bytes, stream_id stream) override {
    ptr_ = rig_.alloc.allocate(bytes, stream);
    return ptr_;
  }
  void recompute() override { produce(); }
  // The consumer: reads the storage on the compute stream.
  void consume() { rig_.dev.copy_async(seen_.data(), ptr_, seen_.size(), rig_.compute); }
  bool came_back_whole() const { return std::memcmp(seen_.data(), pattern_.data(), pattern_.size()) == 0; }

 private:
  void produce() {
    ptr_ = rig_.alloc.allocate(pattern_.size(), rig_.compute);
    rig_.dev.copy_async(ptr_, pattern_.data(), pattern_.size(), rig_.compute);
  }
  runtime_rig& rig_;
  std::vector<std::byte> pattern_;
  std::vector<std::byte> seen_;
  void* ptr_ = nullptr;
};

constexpr int layers = 8;
constexpr std::size_t act = 2 * MiB;
constexpr std::int64_t fwd_ns = 10'000'000;
constexpr std::int64_t bwd_ns = 20'000'000;

struct step_result {
  std::uint64_t host_syncs = 0;
  runtime_stats before, after;
  bool bytes_whole = true;
};

// One training step. Forward: the host issues each layer when the previous
// one would have finished. Backward: the host runs ahead, issuing each layer
// after half of its device time, so it reaches a tensor's use before the
// device does, often before the tensor's prefetch has arrived.
step_result run_step(runtime_rig& rig, memory_runtime& rt, std::uint64_t seed) {
  step_result r;
  r.before = rt.stats();
  const std::uint64_t syncs = rig.dev.host_syncs();
  std::vector<std::unique_ptr<stream_binding>> acts;
  std::vector<tensor_id> ids;
  for (int i = 0; i < layers; ++i) {
    rig.dev.enqueue_work(rig.compute, fwd_ns);
    acts.push_back(std::make_unique<stream_binding>(rig, act, seed + static_cast<std::uint64_t>(i)));
    std::vector<tensor_id> parents;
    if (i > 0) parents.push_back(ids.back());
    track_options more;
    more.parents = parents;
    ids.push_back(rt.track(*acts.back(), act, rig.compute, fwd_ns, true, more));
    rig.clk.advance(fwd_ns);
  }
  for (int i = layers - 1; i >= 0; --i) {
    const auto k = static_cast<std::size_t>(i);
    rt.pin(ids[k]);
    acts[k]->consume();
    rig.dev.enqueue_work(rig.compute, bwd_ns);
    rt.unpin(ids[k]);
    rt.untrack(ids[k]);
    acts[k]->release_device();  // its last use: freed, stream-ordered behind the consumer
    rig.clk.advance(bwd_ns / 2);
  }
  r.host_syncs = rig.dev.host_syncs() - syncs;
  r.after = rt.stats();
  rig.dev.synchronize(rig.compute);  // outside the count: the step's end, as loss.item()
  for (const auto& a : acts) r.bytes_whole = r.bytes_whole && a->came_back_whole();
  rt.step();
  return r;
}

TEST(HostSync, ASteadyStateStepWhosePrefetchesArriveInTimeNeverSynchronisesTheHost) {
  // 1 GB/s: a 2 MiB copy takes 2.1 ms, far less than a layer.
  runtime_rig rig({.capacity = std::size_t{1} << 30, .bandwidth = 1e9, .latency_ns = 10'000, .budget = 10 * MiB});
  memory_runtime::options o;
  o.policy = policy_kind::hybrid;
  o.bandwidth = {.bytes_per_s = 1e9, .latency_ns = 10'000};
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  for (std::uint64_t step = 0; step < 3; ++step) {
    const step_result warm = run_step(rig, rt, 100 * step);
    EXPECT_TRUE(warm.bytes_whole) << "step " << step;
  }
  const step_result s = run_step(rig, rt, 1000);
  EXPECT_TRUE(s.bytes_whole);
  EXPECT_GT(s.after.offloads, s.before.offloads) << "the budget must force swaps";
  EXPECT_GT(s.after.prefetches, s.before.prefetches);
  EXPECT_EQ(s.after.reclaims, s.before.reclaims) << "the plan should leave nothing to reclaim";
  EXPECT_GT(s.after.late_copies, s.before.late_copies) << "the host must reach some uses before their copies";
  EXPECT_EQ(s.host_syncs, 0u);
}

}  // namespace
}  // namespace tp
