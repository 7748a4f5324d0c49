#include "allocator/pinned_host_pool.hpp"

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/clock.hpp"
#include "core/errors.hpp"
#include "device/simulated_device.hpp"

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = KiB * 1024;

// A simulated device with host_capacity bytes of page-lockable memory. The
// simulated device aborts on a wrong deallocate_host, so every test also
// checks that the pool returns exactly what it got.
struct pool_fixture {
  explicit pool_fixture(std::size_t host_capacity = std::size_t{1} << 30) {
    tp::simulated_device::options opts;
    opts.host_capacity_bytes = host_capacity;
    dev = std::make_unique<tp::simulated_device>(opts, clk);
  }
  tp::manual_clock clk;
  std::unique_ptr<tp::simulated_device> dev;
};

std::string oom_message(tp::pinned_host_pool& pool, std::size_t bytes) {
  try {
    (void)pool.allocate(bytes);
  } catch (const tp::out_of_memory& e) {
    return e.what();
  }
  ADD_FAILURE() << "no out_of_memory for " << bytes << " bytes";
  return {};
}

TEST(PinnedHostPool, RoundsToPowerOfTwoClassesThenTwoMiBMultiples) {
  using pool = tp::pinned_host_pool;
  EXPECT_EQ(pool::size_class(0), 4 * KiB);
  EXPECT_EQ(pool::size_class(1), 4 * KiB);
  EXPECT_EQ(pool::size_class(4 * KiB), 4 * KiB);
  EXPECT_EQ(pool::size_class(4 * KiB + 1), 8 * KiB);
  EXPECT_EQ(pool::size_class(3 * MiB), 4 * MiB);
  EXPECT_EQ(pool::size_class(64 * MiB), 64 * MiB);
  EXPECT_EQ(pool::size_class(64 * MiB + 1), 66 * MiB);
  EXPECT_EQ(pool::size_class(100 * MiB), 100 * MiB);
  EXPECT_EQ(pool::size_class(pool::max_request_bytes) % (2 * MiB), 0u);
}

TEST(PinnedHostPool, ReusesCachedBlockOfTheSameClass) {
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev);
  const tp::host_block a = pool.allocate(5000);
  EXPECT_TRUE(a.pinned);
  EXPECT_EQ(a.size, 8 * KiB);
  EXPECT_EQ(a.fallback, tp::host_fallback_reason::none);
  std::memset(a.ptr, 0xab, a.size);
  pool.deallocate(a.ptr);
  const tp::host_block b = pool.allocate(7000);
  EXPECT_EQ(b.ptr, a.ptr);
  const tp::host_pool_stats s = pool.stats();
  EXPECT_EQ(s.num_device_allocs, 1u);
  EXPECT_EQ(s.num_cache_hits, 1u);
  EXPECT_EQ(s.in_use_bytes, 8 * KiB);
  EXPECT_EQ(s.cached_bytes, 0u);
  pool.deallocate(b.ptr);
}

TEST(PinnedHostPool, DoesNotReuseAcrossSizeClasses) {
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev);
  const tp::host_block a = pool.allocate(4 * KiB);
  pool.deallocate(a.ptr);
  const tp::host_block b = pool.allocate(8 * KiB);
  EXPECT_NE(b.ptr, a.ptr);
  EXPECT_EQ(pool.stats().num_device_allocs, 2u);
  EXPECT_EQ(pool.stats().cached_bytes, 4 * KiB);
  pool.deallocate(b.ptr);
}

TEST(PinnedHostPool, LargeBlocksAreBestFitWithinAQuarter) {
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev);
  const tp::host_block big = pool.allocate(100 * MiB);
  const tp::host_block mid = pool.allocate(80 * MiB);
  pool.deallocate(big.ptr);
  pool.deallocate(mid.ptr);
  const tp::host_block c = pool.allocate(70 * MiB);  // 80 MiB fits best, 100 MiB > 125%
  EXPECT_EQ(c.ptr, mid.ptr);
  EXPECT_EQ(c.size, 80 * MiB);
  const tp::host_block d = pool.allocate(66 * MiB);  // 100 MiB is too wasteful
  EXPECT_NE(d.ptr, big.ptr);
  EXPECT_EQ(d.size, 66 * MiB);
  EXPECT_EQ(pool.stats().cached_bytes, 100 * MiB);
  pool.deallocate(c.ptr);
  pool.deallocate(d.ptr);
}

TEST(PinnedHostPool, ReleasesCacheToStayWithinBudget) {
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev, {.host_budget = 16 * KiB});
  const tp::host_block a = pool.allocate(4 * KiB);
  const tp::host_block b = pool.allocate(8 * KiB);
  pool.deallocate(a.ptr);
  pool.deallocate(b.ptr);  // cached: 4 + 8 KiB
  const tp::host_block c = pool.allocate(16 * KiB);
  EXPECT_TRUE(c.pinned);
  const tp::host_pool_stats s = pool.stats();
  EXPECT_EQ(s.in_use_bytes, 16 * KiB);
  EXPECT_EQ(s.cached_bytes, 0u);
  pool.deallocate(c.ptr);
}

TEST(PinnedHostPool, ReleasesLargestCachedBlocksFirstAndOnlyWhatIsNeeded) {
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev, {.host_budget = 32 * KiB});
  const tp::host_block x = pool.allocate(16 * KiB);
  const tp::host_block y = pool.allocate(4 * KiB);
  const tp::host_block z = pool.allocate(8 * KiB);
  pool.deallocate(x.ptr);
  pool.deallocate(y.ptr);  // held 28 KiB: 8 in use, 16 + 4 cached
  const tp::host_block g = pool.allocate(8 * KiB);  // 36 > 32: frees the 16 KiB block only
  EXPECT_TRUE(g.pinned);
  EXPECT_EQ(pool.stats().cached_bytes, 4 * KiB);
  const tp::host_block h = pool.allocate(4 * KiB);
  EXPECT_EQ(h.ptr, y.ptr);
  for (void* p : {z.ptr, g.ptr, h.ptr}) pool.deallocate(p);
}

TEST(PinnedHostPool, FullBudgetThrowsWithTheFiguresAndAHint) {
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev, {.host_budget = 16 * KiB});
  const tp::host_block a = pool.allocate(8 * KiB);
  const tp::host_block b = pool.allocate(8 * KiB);
  EXPECT_EQ(oom_message(pool, 3000),
            "pinned host pool full: requested 2.93 KiB (size class 4.00 KiB), host_budget "
            "16.00 KiB, in use 16.00 KiB, cached 0 B; raise host_budget or set "
            "host_fallback:pageable");
  const tp::host_pool_stats s = pool.stats();
  EXPECT_EQ(s.in_use_bytes, 16 * KiB);
  EXPECT_EQ(s.num_fallbacks, 0u);
  pool.deallocate(a.ptr);
  pool.deallocate(b.ptr);
}

TEST(PinnedHostPool, FallsBackToPageableMemoryWhenAskedTo) {
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev,
                            {.host_budget = 8 * KiB, .fallback = tp::host_fallback::pageable});
  const tp::host_block a = pool.allocate(8 * KiB);
  const tp::host_block b = pool.allocate(5000);
  EXPECT_FALSE(b.pinned);
  EXPECT_EQ(b.fallback, tp::host_fallback_reason::budget);
  EXPECT_EQ(b.size, 8 * KiB);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.ptr) % 4096, 0u);
  std::memset(b.ptr, 0x5a, b.size);
  tp::host_pool_stats s = pool.stats();
  EXPECT_EQ(s.pageable_bytes, 8 * KiB);
  EXPECT_EQ(s.num_fallbacks, 1u);
  EXPECT_EQ(s.in_use_bytes, 8 * KiB);
  pool.deallocate(b.ptr);
  s = pool.stats();
  EXPECT_EQ(s.pageable_bytes, 0u);
  EXPECT_EQ(s.cached_bytes, 0u);  // pageable blocks are not cached
  pool.deallocate(a.ptr);
}

TEST(PinnedHostPool, HandlesADeviceThatCannotLockMore) {
  pool_fixture f(64 * KiB);
  {
    tp::pinned_host_pool pool(*f.dev);
    const tp::host_block a = pool.allocate(64 * KiB);
    const std::string msg = oom_message(pool, 4 * KiB);
    EXPECT_NE(msg.find("pinned host pool full: requested 4.00 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("host_budget unlimited, in use 64.00 KiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("could not page-lock 4.00 KiB more"), std::string::npos) << msg;
    EXPECT_NE(msg.find("host_fallback:pageable"), std::string::npos) << msg;
    pool.deallocate(a.ptr);  // cached; the next request reclaims it and retries
    const tp::host_block b = pool.allocate(32 * KiB);
    EXPECT_TRUE(b.pinned);
    EXPECT_EQ(pool.stats().cached_bytes, 0u);
    pool.deallocate(b.ptr);
  }
  tp::pinned_host_pool pool(*f.dev, {.host_budget = std::nullopt, .fallback = tp::host_fallback::pageable});
  const tp::host_block a = pool.allocate(64 * KiB);
  const tp::host_block b = pool.allocate(1);
  EXPECT_FALSE(b.pinned);
  EXPECT_EQ(b.fallback, tp::host_fallback_reason::device);
  EXPECT_EQ(b.size, 4 * KiB);
  pool.deallocate(a.ptr);
  pool.deallocate(b.ptr);
}

TEST(PinnedHostPool, ReleaseCachedReturnsMemoryToTheDevice) {
  pool_fixture f(64 * KiB);
  tp::pinned_host_pool pool(*f.dev);
  pool.deallocate(pool.allocate(32 * KiB).ptr);
  pool.deallocate(pool.allocate(16 * KiB).ptr);
  EXPECT_EQ(pool.stats().cached_bytes, 48 * KiB);
  pool.release_cached();
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  void* all = f.dev->try_allocate_host(64 * KiB);
  ASSERT_NE(all, nullptr);
  f.dev->deallocate_host(all, 64 * KiB);
}

static_assert(noexcept(std::declval<tp::pinned_host_pool&>().deallocate(nullptr)));

// deallocate is noexcept: a foreign pointer or a double free ends the process
// with a message naming it, as free() does (tp::fail_fast).
TEST(PinnedHostPool, ForeignPointersAndDoubleFreesEndTheProcessWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev);
  const tp::host_block a = pool.allocate(4 * KiB);
  int local = 0;
  EXPECT_DEATH(pool.deallocate(&local), "was not allocated by this pool, or was already freed");
  EXPECT_DEATH(pool.deallocate(static_cast<char*>(a.ptr) + 16), "was not allocated by this pool");
  EXPECT_EQ(pool.stats().in_use_bytes, 4 * KiB);
  pool.deallocate(a.ptr);
  EXPECT_DEATH(pool.deallocate(a.ptr), "was already freed");
  EXPECT_EQ(pool.stats().cached_bytes, 4 * KiB);
  pool.deallocate(nullptr);
}

TEST(PinnedHostPool, SetBudgetRefusesLessThanInUseAndTrimsTheCache) {
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev);
  const tp::host_block a = pool.allocate(8 * KiB);
  pool.deallocate(pool.allocate(16 * KiB).ptr);
  EXPECT_THROW(pool.set_budget(4 * KiB), tp::invalid_argument);
  EXPECT_EQ(pool.budget(), std::nullopt);
  EXPECT_EQ(pool.stats().cached_bytes, 16 * KiB);
  pool.set_budget(8 * KiB);
  EXPECT_EQ(pool.budget(), 8 * KiB);
  EXPECT_EQ(pool.stats().cached_bytes, 0u);
  pool.set_budget(std::nullopt);
  pool.deallocate(a.ptr);
}

TEST(PinnedHostPool, DestructorReturnsBlocksInUseAndCached) {
  pool_fixture f(64 * KiB);
  {
    tp::pinned_host_pool pool(*f.dev, {.host_budget = std::nullopt, .fallback = tp::host_fallback::pageable});
    (void)pool.allocate(32 * KiB);
    pool.deallocate(pool.allocate(16 * KiB).ptr);
    (void)pool.allocate(16 * KiB);  // a hit
    (void)pool.allocate(32 * KiB);  // pageable: the device is full
  }
  void* all = f.dev->try_allocate_host(64 * KiB);
  ASSERT_NE(all, nullptr);
  f.dev->deallocate_host(all, 64 * KiB);
}

TEST(PinnedHostPool, TracksPeakAndRejectsImpossibleRequests) {
  pool_fixture f;
  tp::pinned_host_pool pool(*f.dev, {.host_budget = std::nullopt, .fallback = tp::host_fallback::pageable});
  const tp::host_block a = pool.allocate(64 * KiB);
  pool.deallocate(a.ptr);
  EXPECT_EQ(pool.stats().peak_in_use_bytes, 64 * KiB);
  EXPECT_THROW((void)pool.allocate(SIZE_MAX), tp::out_of_memory);
  EXPECT_THROW((void)pool.allocate(SIZE_MAX), std::bad_alloc);
}

TEST(PinnedHostPool, ConcurrentAllocateAndFreeFromFourThreads) {
  pool_fixture f(256 * KiB);
  constexpr std::size_t budget = 128 * KiB;
  tp::pinned_host_pool pool(*f.dev, {.host_budget = budget, .fallback = tp::host_fallback::pageable});
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, &failures, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      std::vector<tp::host_block> mine;
      for (int i = 0; i < 3000; ++i) {
        if (mine.size() < 6 && rng() % 3 != 0) {
          const std::size_t bytes = std::size_t{1} << (rng() % 15 + 1);  // 2 B .. 32 KiB
          tp::host_block b = pool.allocate(bytes);
          std::memset(b.ptr, t + 1, b.size);
          mine.push_back(b);
        } else if (!mine.empty()) {
          const std::size_t k = rng() % mine.size();
          const auto* bytes = static_cast<const unsigned char*>(mine[k].ptr);
          for (std::size_t j = 0; j < mine[k].size; j += 512) {
            if (bytes[j] != t + 1) ++failures[static_cast<std::size_t>(t)];
          }
          pool.deallocate(mine[k].ptr);
          mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(k));
        }
        const tp::host_pool_stats s = pool.stats();
        if (s.in_use_bytes + s.cached_bytes > budget) ++failures[static_cast<std::size_t>(t)];
      }
      for (const auto& b : mine) pool.deallocate(b.ptr);
    });
  }
  for (auto& th : threads) th.join();
  for (int n : failures) EXPECT_EQ(n, 0);
  const tp::host_pool_stats s = pool.stats();
  EXPECT_EQ(s.in_use_bytes, 0u);
  EXPECT_EQ(s.pageable_bytes, 0u);
  EXPECT_LE(s.cached_bytes, budget);
  EXPECT_GT(s.num_cache_hits, 0u);
}

}  // namespace
