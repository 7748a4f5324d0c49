// tensorpager's statistics and snapshots in c10's types, as the CUDA adapter
// hands them to torch.cuda.memory_stats() and torch.cuda.memory._snapshot().
// Pure conversions: checked here on the CPU, over a real caching allocator.

#include <gtest/gtest.h>

#include "allocator/caching_allocator.hpp"
#include "core/clock.hpp"
#include "device/simulated_device.hpp"
#include "hooks/c10_conversions.hpp"

namespace tp::hooks {
namespace {

using c10::CachingAllocator::StatType;

constexpr std::size_t idx(StatType t) { return static_cast<std::size_t>(t); }

class C10Conversions : public ::testing::Test {
 protected:
  manual_clock clock_;
  simulated_device device_{clock_};
  caching_allocator allocator_{device_};
};

TEST_F(C10Conversions, DeviceStatsCarryEveryFigureByPool) {
  void* small = allocator_.allocate(4096);
  void* large = allocator_.allocate(std::size_t{3} << 20);
  allocator_.deallocate(small);
  const allocator_stats s = allocator_.stats();
  const auto d = to_device_stats(s);

  EXPECT_EQ(d.allocation[idx(StatType::AGGREGATE)].current, 1);
  EXPECT_EQ(d.allocation[idx(StatType::AGGREGATE)].allocated, 2);
  EXPECT_EQ(d.allocation[idx(StatType::AGGREGATE)].freed, 1);
  EXPECT_EQ(d.allocation[idx(StatType::SMALL_POOL)].current, 0);
  EXPECT_EQ(d.allocation[idx(StatType::LARGE_POOL)].current, 1);
  EXPECT_EQ(d.allocated_bytes[idx(StatType::AGGREGATE)].current, std::int64_t{3} << 20);
  EXPECT_EQ(d.allocated_bytes[idx(StatType::AGGREGATE)].peak, (std::int64_t{3} << 20) + 4096);
  EXPECT_EQ(d.reserved_bytes[idx(StatType::SMALL_POOL)].current, std::int64_t{2} << 20);
  EXPECT_EQ(d.reserved_bytes[idx(StatType::LARGE_POOL)].current, std::int64_t{20} << 20);
  EXPECT_EQ(d.segment[idx(StatType::AGGREGATE)].current, 2);
  EXPECT_EQ(d.requested_bytes[idx(StatType::AGGREGATE)].current, std::int64_t{3} << 20);
  EXPECT_EQ(d.inactive_split_bytes[idx(StatType::LARGE_POOL)].current,
            s.inactive_split_bytes.of(pool_kind::large).current);
  EXPECT_EQ(d.active_bytes[idx(StatType::AGGREGATE)].current, s.active_bytes.all().current);
  EXPECT_EQ(d.num_device_alloc, 2);
  EXPECT_EQ(d.num_device_free, 0);
  EXPECT_EQ(d.num_ooms, 0);
  EXPECT_EQ(d.max_split_size, -1);  // unlimited, as PyTorch reports its default
  allocator_.deallocate(large);
}

TEST_F(C10Conversions, SegmentInfoBlocksCoverTheSegmentInOrder) {
  void* a = allocator_.allocate(4096);
  void* b = allocator_.allocate(8192);
  allocator_.deallocate(a);
  const auto segments = allocator_.snapshot();
  ASSERT_EQ(segments.size(), 1u);
  const auto info = to_segment_info(segments[0], 3);

  EXPECT_EQ(info.device, 3);
  EXPECT_EQ(info.address, segments[0].address);
  EXPECT_EQ(info.total_size, std::size_t{2} << 20);
  EXPECT_FALSE(info.is_large);
  EXPECT_EQ(info.allocated_size, 8192u);
  EXPECT_EQ(info.requested_size, 8192u);
  EXPECT_EQ(info.stream, nullptr);  // the default stream
  std::size_t covered = 0;
  std::size_t allocated_blocks = 0;
  for (const auto& block : info.blocks) {
    covered += block.size;
    if (block.allocated) {
      ++allocated_blocks;
      EXPECT_TRUE(block.active);
      EXPECT_EQ(block.size, 8192u);
    }
  }
  EXPECT_EQ(covered, info.total_size);
  EXPECT_EQ(allocated_blocks, 1u);
  allocator_.deallocate(b);
}

}  // namespace
}  // namespace tp::hooks
