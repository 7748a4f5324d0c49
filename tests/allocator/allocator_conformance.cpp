#include "allocator_conformance.hpp"

#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "core/errors.hpp"

namespace tp::testing {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

/// A page-locked host buffer from the device, freed on scope exit.
class host_buffer {
 public:
  host_buffer(device& d, std::size_t bytes) : dev_(d), bytes_(bytes), ptr_(d.try_allocate_host(bytes)) {
    if (ptr_ == nullptr) throw error("no pinned host memory for the test");
  }
  ~host_buffer() { dev_.deallocate_host(ptr_, bytes_); }
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }

 private:
  device& dev_;
  std::size_t bytes_;
  void* ptr_;
};

void fill(unsigned char* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>((i * 131 + seed) & 0xff);
}

bool holds(const unsigned char* p, std::size_t n, unsigned seed) {
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] != static_cast<unsigned char>((i * 131 + seed) & 0xff)) return false;
  }
  return true;
}

TEST_P(AllocatorConformance, DataSurvivesRoundTripThroughAllocatedBlocks) {
  caching_allocator a(*dev_);
  host_buffer in(*dev_, 3 * MiB), out(*dev_, 3 * MiB);
  fill(in.data(), 3 * MiB, 5);
  void* p = a.allocate(3 * MiB);
  void* q = a.allocate(3 * MiB);
  dev_->copy_async(p, in.data(), 3 * MiB, default_stream);
  dev_->copy_async(q, p, 3 * MiB, default_stream);
  dev_->copy_async(out.data(), q, 3 * MiB, default_stream);
  dev_->synchronize(default_stream);
  EXPECT_TRUE(holds(out.data(), 3 * MiB, 5));
  a.deallocate(p);
  a.deallocate(q);
}

TEST_P(AllocatorConformance, ReservedMemoryComesFromTheDeviceAndEmptyCacheReturnsIt) {
  caching_allocator a(*dev_);
  const std::size_t free0 = dev_->memory().free_bytes;
  void* p = a.allocate(64 * MiB);
  EXPECT_LE(dev_->memory().free_bytes, free0 - 64 * MiB);
  a.deallocate(p);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all().current, 0);
  // Other processes may use a real GPU meanwhile: allow 1% of slack.
  EXPECT_GE(dev_->memory().free_bytes + free0 / 100, free0);
}

TEST_P(AllocatorConformance, RecordStreamKeepsBlockUntilOtherStreamIsDone) {
  caching_allocator a(*dev_);
  const stream_id side = dev_->create_stream();
  host_buffer in(*dev_, 8 * MiB), out(*dev_, 8 * MiB);
  fill(in.data(), 8 * MiB, 9);
  void* p = a.allocate(8 * MiB);
  dev_->copy_async(p, in.data(), 8 * MiB, default_stream);
  const event_id written = dev_->create_event();
  dev_->record_event(written, default_stream);
  dev_->stream_wait_event(side, written);
  dev_->copy_async(out.data(), p, 8 * MiB, side);  // the side stream reads p
  a.record_stream(p, side);
  a.deallocate(p);
  // Whatever the allocator hands out now must not be p while side may read.
  void* q = a.allocate(8 * MiB);
  host_buffer junk(*dev_, 8 * MiB);
  std::memset(junk.data(), 0xee, 8 * MiB);
  dev_->copy_async(q, junk.data(), 8 * MiB, default_stream);
  dev_->synchronize(side);
  dev_->synchronize(default_stream);
  EXPECT_TRUE(holds(out.data(), 8 * MiB, 9)) << "the side stream read a reused block";
  a.deallocate(q);
  dev_->destroy_event(written);
  a.empty_cache();
  dev_->destroy_stream(side);
}

TEST_P(AllocatorConformance, BudgetCapsReservedBytes) {
  caching_allocator a(*dev_, {.budget = 48 * MiB});
  std::vector<void*> ps;
  EXPECT_THROW(
      {
        for (int i = 0; i < 64; ++i) ps.push_back(a.allocate(5 * MiB));
      },
      out_of_memory);
  EXPECT_LE(a.stats().reserved_bytes.all().peak, std::int64_t(48 * MiB));
  for (void* p : ps) a.deallocate(p);
}

TEST_P(AllocatorConformance, StatisticsBalanceAfterFreeingEverything) {
  caching_allocator a(*dev_);
  std::vector<void*> ps;
  for (std::size_t s : {std::size_t{1}, std::size_t{4096}, MiB, 3 * MiB, 25 * MiB}) ps.push_back(a.allocate(s));
  for (void* p : ps) a.deallocate(p);
  const auto s = a.stats();
  EXPECT_EQ(s.allocated_bytes.all().current, 0);
  EXPECT_EQ(s.active_bytes.all().current, 0);
  EXPECT_EQ(s.allocated_bytes.all().allocated, s.allocated_bytes.all().freed);
  EXPECT_GT(s.reserved_bytes.all().current, 0);
}

// --- expandable segments (Note [Expandable segments]): the same behaviour over
// the device's virtual-memory calls ------------------------------------------

caching_allocator::options expandable(std::optional<std::size_t> budget = std::nullopt) {
  caching_allocator::options o;
  o.budget = budget;
  o.expandable_segments = true;
  return o;
}

TEST_P(AllocatorConformance, ExpandableBlocksKeepTheirDataWhileNeighboursAreUnmappedAndRemapped) {
  caching_allocator a(*dev_, expandable());
  const std::size_t g = dev_->granularity();
  host_buffer in(*dev_, 3 * g), out(*dev_, 3 * g);
  fill(in.data(), 3 * g, 21);
  void* left = a.allocate(3 * g / 2);  // shares its last granule with `middle`
  void* middle = a.allocate(4 * g);
  void* right = a.allocate(3 * g);     // spans two maps: grown after `middle`
  dev_->copy_async(left, in.data(), 3 * g / 2, default_stream);
  dev_->copy_async(right, in.data(), 3 * g, default_stream);
  a.deallocate(middle);
  a.empty_cache();  // unmaps middle's whole granules
  EXPECT_LT(a.stats().reserved_bytes.all().current, std::int64_t(9 * g));
  void* again = a.allocate(2 * g);  // maps granules again
  host_buffer junk(*dev_, 2 * g);
  std::memset(junk.data(), 0x3c, 2 * g);
  dev_->copy_async(again, junk.data(), 2 * g, default_stream);
  dev_->copy_async(out.data(), left, 3 * g / 2, default_stream);
  dev_->synchronize(default_stream);
  EXPECT_TRUE(holds(out.data(), 3 * g / 2, 21)) << "left lost its contents";
  dev_->copy_async(out.data(), right, 3 * g, default_stream);
  dev_->synchronize(default_stream);
  EXPECT_TRUE(holds(out.data(), 3 * g, 21)) << "right lost its contents";
  a.deallocate(again);
  a.deallocate(left);
  a.deallocate(right);
}

TEST_P(AllocatorConformance, ExpandableSegmentsMoveGranulesWhereTheBudgetNeedsThem) {
  const std::size_t g = dev_->granularity();
  caching_allocator a(*dev_, expandable(8 * g));
  const stream_id side = dev_->create_stream();
  std::vector<void*> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(a.allocate(2 * g));
  a.deallocate(ps[1]);
  a.deallocate(ps[3]);
  // 4 granules free in two holes, budget full: a 3-granule request on
  // another stream gets them unmapped and mapped for it.
  void* q = a.allocate(3 * g, side);
  EXPECT_LE(a.stats().reserved_bytes.all().peak, std::int64_t(8 * g));
  host_buffer in(*dev_, 3 * g), out(*dev_, 3 * g);
  fill(in.data(), 3 * g, 23);
  dev_->copy_async(q, in.data(), 3 * g, side);
  dev_->copy_async(out.data(), q, 3 * g, side);
  dev_->synchronize(side);
  EXPECT_TRUE(holds(out.data(), 3 * g, 23));
  a.deallocate(q);
  a.deallocate(ps[0]);
  a.deallocate(ps[2]);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all().current, 0);
  dev_->destroy_stream(side);
}

TEST_P(AllocatorConformance, ExpandableRecordStreamKeepsGranulesMappedUntilTheOtherStreamIsDone) {
  caching_allocator a(*dev_, expandable());
  const std::size_t g = dev_->granularity();
  const stream_id side = dev_->create_stream();
  host_buffer in(*dev_, 4 * g), out(*dev_, 4 * g);
  fill(in.data(), 4 * g, 25);
  void* p = a.allocate(4 * g);
  dev_->copy_async(p, in.data(), 4 * g, default_stream);
  const event_id written = dev_->create_event();
  dev_->record_event(written, default_stream);
  dev_->stream_wait_event(side, written);
  dev_->copy_async(out.data(), p, 4 * g, side);
  a.record_stream(p, side);
  a.deallocate(p);
  a.empty_cache();  // must not unmap what the side stream still reads
  dev_->synchronize(side);
  EXPECT_TRUE(holds(out.data(), 4 * g, 25));
  dev_->destroy_event(written);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all().current, 0);
  dev_->destroy_stream(side);
}

}  // namespace
}  // namespace tp::testing
