// Note [Tensors used on several streams] (runtime/transfer_engine.hpp): what
// reads or frees a tracked tensor's device storage behind the program's back
// is ordered after every stream that used it, and a restore orders every
// stream that asks for it after its copy. A held stream (simulated_device::
// hold_stream) stands for one still busy, as a side stream kept busy by
// torch.cuda._sleep was on the H200 where the runtime first gave wrong
// gradients without this.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "runtime/runtime.hpp"
#include "tests/runtime/runtime_test_support.hpp"

namespace tp {
namespace {

using testing::fake_binding;
using testing::KiB;
using testing::runtime_rig;

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>((seed * 31 + i) & 0xff);
  return v;
}

std::vector<std::byte> read(runtime_rig& rig, const void* p, std::size_t bytes) {
  std::vector<std::byte> v(bytes);
  rig.dev.copy_async(v.data(), p, bytes, rig.compute);
  rig.dev.synchronize(rig.compute);
  return v;
}

TEST(SeveralStreams, AnOffloadCopiesWhatAnotherStreamThatUsedTheTensorWrote) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  fake_binding a(rig, 256 * KiB, 7);
  const tensor_id id = rt.track(a, a.bytes(), rig.compute, 0);
  // Work on `side` writes the tensor and has not run yet.
  const stream_id side = rig.dev.create_stream();
  const std::vector<std::byte> written = pattern(a.bytes(), 3);
  rig.dev.hold_stream(side);
  rig.dev.copy_async(a.device_ptr(), written.data(), written.size(), side);
  rt.use_on(id, side);

  ASSERT_TRUE(rt.offload(id));
  rt.poll();
  EXPECT_EQ(rt.state(id), tensor_state::offloading) << "the copy ran before the work on `side`";
  rig.dev.release_stream(side);
  rig.dev.synchronize(side);
  rt.poll();
  ASSERT_EQ(rt.state(id), tensor_state::on_host);
  rt.access(id);
  EXPECT_EQ(read(rig, a.device_ptr(), a.bytes()), written);
  rig.dev.destroy_stream(side);
}

TEST(SeveralStreams, ADropKeepsTheBlockUntilEveryStreamThatUsedItIsDone) {
  runtime_rig rig({.host_budget = 64 * KiB});  // no room on the host: reclaim drops
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  fake_binding a(rig, 256 * KiB, 7);
  const tensor_id id = rt.track(a, a.bytes(), rig.compute, /*recompute_cost_ns=*/500);
  // Work on `side` still reads the tensor.
  const stream_id side = rig.dev.create_stream();
  std::vector<std::byte> seen(a.bytes());
  rig.dev.hold_stream(side);
  rig.dev.copy_async(seen.data(), a.device_ptr(), seen.size(), side);
  rt.use_on(id, side);
  void* const block = a.device_ptr();

  ASSERT_EQ(rt.reclaim(a.bytes(), rig.compute), a.bytes());
  ASSERT_EQ(rt.state(id), tensor_state::dropped);
  void* next = rig.alloc.allocate(a.bytes(), rig.compute);
  EXPECT_NE(next, block) << "handed out a block that queued work on `side` still reads";
  rig.dev.release_stream(side);
  rig.dev.synchronize(side);
  rig.alloc.deallocate(next);
  rig.dev.destroy_stream(side);
}

TEST(SeveralStreams, ARestoreMakesTheStreamThatAsksWaitForItsCopy) {
  runtime_rig rig;
  memory_runtime::options o;
  o.prefetch_stream = rig.dev.create_stream();
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  fake_binding a(rig, 256 * KiB, 7);
  const std::vector<std::byte> before = read(rig, a.device_ptr(), a.bytes());
  const tensor_id id = rt.track(a, a.bytes(), rig.compute, 0);
  ASSERT_TRUE(rt.offload(id));
  rig.clk.advance(5000);
  rt.poll();
  ASSERT_EQ(rt.state(id), tensor_state::on_host);

  const stream_id side = rig.dev.create_stream();
  rig.dev.hold_stream(*o.prefetch_stream);  // the copy back has not run yet
  rt.access(id, side);                       // the host does not wait for it ...
  std::vector<std::byte> seen(a.bytes());
  rig.dev.copy_async(seen.data(), a.device_ptr(), seen.size(), side);
  rig.clk.advance(1'000'000);
  EXPECT_NE(rig.dev.pending_ops(side), 0u) << "side read the tensor before its copy back";
  rig.dev.release_stream(*o.prefetch_stream);  // ... `side` does
  rig.dev.synchronize(side);
  EXPECT_EQ(seen, before);
  rt.untrack(id);
  rig.dev.destroy_stream(side);
}

}  // namespace
}  // namespace tp
