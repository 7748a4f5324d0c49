// segment_listener: told of every segment taken from and returned to the
// device, with its address, size and stream (the CUDA adapter's
// SEGMENT_ALLOC / SEGMENT_FREE trace entries), and of nothing else.

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator/segment_listener.hpp"
#include "allocator_test_support.hpp"

namespace tp {
namespace {

using namespace tp::testing;

struct recording_listener final : segment_listener {
  using entry = std::tuple<char, std::uintptr_t, std::size_t, stream_id>;  // 'a'lloc or 'f'ree
  std::vector<entry> entries;
  void on_segment_alloc(std::uintptr_t address, std::size_t bytes, stream_id stream) noexcept override {
    entries.emplace_back('a', address, bytes, stream);
  }
  void on_segment_free(std::uintptr_t address, std::size_t bytes, stream_id stream) noexcept override {
    entries.emplace_back('f', address, bytes, stream);
  }
};

TEST(SegmentListener, HearsEverySegmentAllocAndFreeWithItsStream) {
  simulated_rig rig;
  caching_allocator a(rig.dev);
  recording_listener l;
  a.set_segment_listener(&l);
  const stream_id s = rig.dev.create_stream();

  void* small = a.allocate(4 * KiB, s);        // a 2 MiB small segment
  void* again = a.allocate(4 * KiB, s);        // served from it: no new segment
  void* large = a.allocate(30 * MiB);          // its own segment, default stream
  ASSERT_EQ(l.entries.size(), 2u);
  EXPECT_EQ(l.entries[0], std::make_tuple('a', reinterpret_cast<std::uintptr_t>(small), 2 * MiB, s));
  EXPECT_EQ(l.entries[1], std::make_tuple('a', reinterpret_cast<std::uintptr_t>(large), 30 * MiB, default_stream));

  a.deallocate(small);
  a.deallocate(again);
  a.deallocate(large);
  EXPECT_EQ(l.entries.size(), 2u) << "freeing blocks into the cache returns no segment";
  a.empty_cache();
  ASSERT_EQ(l.entries.size(), 4u);
  const std::vector<recording_listener::entry> freed(l.entries.begin() + 2, l.entries.end());
  const auto has = [&](const recording_listener::entry& e) {
    return std::find(freed.begin(), freed.end(), e) != freed.end();
  };
  EXPECT_TRUE(has({'f', reinterpret_cast<std::uintptr_t>(small), 2 * MiB, s}));
  EXPECT_TRUE(has({'f', reinterpret_cast<std::uintptr_t>(large), 30 * MiB, default_stream}));
  EXPECT_EQ(reserved(a), 0);
  rig.dev.destroy_stream(s);
}

TEST(SegmentListener, DetachedListenerHearsNothing) {
  simulated_rig rig;
  caching_allocator a(rig.dev);
  recording_listener l;
  a.set_segment_listener(&l);
  a.set_segment_listener(nullptr);
  a.deallocate(a.allocate(1 * MiB));
  a.empty_cache();
  EXPECT_TRUE(l.entries.empty());
}

}  // namespace
}  // namespace tp
