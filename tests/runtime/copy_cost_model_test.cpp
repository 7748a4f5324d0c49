// Note [Copy cost model] (runtime/copy_cost_model.hpp): the seed before any
// copy is timed, convergence to what copies take, per direction and size
// class, and how little one outlier moves it.

#include "runtime/copy_cost_model.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

namespace tp {
namespace {

constexpr std::size_t KiB = 1024, MiB = 1024 * KiB;
constexpr bandwidth_model seed{.bytes_per_s = 10e9, .latency_ns = 10'000};

/// A copy of bytes at bytes_per_s after latency_ns, in ns.
std::int64_t copy_ns(std::size_t bytes, double bytes_per_s, std::int64_t latency_ns) {
  return latency_ns + static_cast<std::int64_t>(static_cast<double>(bytes) * 1e9 / bytes_per_s);
}

TEST(CopyCostModel, SizeClassesAreSixteenTimesApart) {
  EXPECT_EQ(copy_cost_model::size_class(1), 0u);
  EXPECT_EQ(copy_cost_model::size_class(256 * KiB - 1), 0u);
  EXPECT_EQ(copy_cost_model::size_class(256 * KiB), 1u);
  EXPECT_EQ(copy_cost_model::size_class(4 * MiB - 1), 1u);
  EXPECT_EQ(copy_cost_model::size_class(4 * MiB), 2u);
  EXPECT_EQ(copy_cost_model::size_class(64 * MiB), 3u);
  EXPECT_EQ(copy_cost_model::size_class(std::size_t{1} << 40), 3u);
}

TEST(CopyCostModel, PricesCopiesFromTheSeedUntilOneIsTimed) {
  const copy_cost_model m(seed);
  for (const std::size_t bytes : {std::size_t{4} * KiB, MiB, 32 * MiB, 256 * MiB}) {
    for (const copy_direction d : {copy_direction::to_host, copy_direction::to_device}) {
      EXPECT_EQ(m.transfer_ns(d, bytes), seed.transfer_ns(bytes));
      EXPECT_EQ(m.samples(d, bytes), 0u);
      EXPECT_EQ(m.factor(d, bytes), 1.0);
    }
    EXPECT_EQ(m.round_trip_ns(bytes), 2 * seed.transfer_ns(bytes));
  }
}

// Copies to the host at 25 GB/s and to the device at 3 GB/s, with 2 us of
// latency: each direction and class converges to what its copies took; a
// class nothing measured keeps the seed.
TEST(CopyCostModel, ConvergesToTheMeasuredTimesPerDirectionAndSizeClass) {
  copy_cost_model m(seed);
  for (int i = 0; i < 40; ++i) {
    for (const std::size_t bytes : {std::size_t{64} * KiB, 16 * MiB}) {
      m.observe(copy_direction::to_host, bytes, copy_ns(bytes, 25e9, 2'000));
      m.observe(copy_direction::to_device, bytes, copy_ns(bytes, 3e9, 2'000));
    }
  }
  for (const std::size_t bytes : {std::size_t{64} * KiB, 16 * MiB}) {
    SCOPED_TRACE(bytes);
    EXPECT_NEAR(static_cast<double>(m.transfer_ns(copy_direction::to_host, bytes)),
                static_cast<double>(copy_ns(bytes, 25e9, 2'000)), 1.0);
    EXPECT_NEAR(static_cast<double>(m.transfer_ns(copy_direction::to_device, bytes)),
                static_cast<double>(copy_ns(bytes, 3e9, 2'000)), 1.0);
    EXPECT_EQ(m.samples(copy_direction::to_host, bytes), 40u);
  }
  // Within a class the seed's shape stands, scaled: 32 MiB costs about twice
  // 16 MiB at the measured rate (the latency is small beside either).
  const double twice = 2.0 * static_cast<double>(copy_ns(16 * MiB, 3e9, 2'000));
  EXPECT_NEAR(static_cast<double>(m.transfer_ns(copy_direction::to_device, 32 * MiB)), twice, 0.01 * twice);
  // Unmeasured: 1 MiB (class 1) and 128 MiB (class 3).
  EXPECT_EQ(m.transfer_ns(copy_direction::to_device, MiB), seed.transfer_ns(MiB));
  EXPECT_EQ(m.transfer_ns(copy_direction::to_host, 128 * MiB), seed.transfer_ns(128 * MiB));
}

TEST(CopyCostModel, TheFirstTimedCopyReplacesTheSeed) {
  copy_cost_model m(seed);
  m.observe(copy_direction::to_host, 16 * MiB, 5'000'000);
  EXPECT_EQ(m.transfer_ns(copy_direction::to_host, 16 * MiB), 5'000'000);
  EXPECT_EQ(m.transfer_ns(copy_direction::to_device, 16 * MiB), seed.transfer_ns(16 * MiB));
}

// Averaged in log space: after eight copies at 1 ms, one at 100 ms moves the
// estimate by 100^(1/8), not by 12x as an arithmetic average would; later
// copies bring it back.
TEST(CopyCostModel, OneSlowCopyMovesTheEstimateLittle) {
  copy_cost_model m(seed);
  for (int i = 0; i < 8; ++i) m.observe(copy_direction::to_device, 16 * MiB, 1'000'000);
  m.observe(copy_direction::to_device, 16 * MiB, 100'000'000);
  const auto after = static_cast<double>(m.transfer_ns(copy_direction::to_device, 16 * MiB));
  EXPECT_NEAR(after, 1e6 * 1.778, 1e4);
  for (int i = 0; i < 40; ++i) m.observe(copy_direction::to_device, 16 * MiB, 1'000'000);
  EXPECT_NEAR(static_cast<double>(m.transfer_ns(copy_direction::to_device, 16 * MiB)), 1e6, 1e4);
}

TEST(CopyCostModel, IgnoresWhatTeachesNothing) {
  copy_cost_model m(seed);
  m.observe(copy_direction::to_host, 0, 1'000);
  m.observe(copy_direction::to_host, MiB, -1);
  EXPECT_EQ(m.samples(copy_direction::to_host, 0), 0u);
  EXPECT_EQ(m.samples(copy_direction::to_host, MiB), 0u);
}

TEST(CopyCostModel, DiffersFromAnotherWhenAClassMovedPastTheRatio) {
  copy_cost_model a(seed);
  const copy_cost_model planned = a;
  a.observe(copy_direction::to_host, MiB, seed.transfer_ns(MiB) * 11 / 10);  // 10% slower
  EXPECT_FALSE(a.differs_from(planned, 1.25));
  a.observe(copy_direction::to_host, MiB, seed.transfer_ns(MiB) * 2);
  EXPECT_TRUE(a.differs_from(planned, 1.25));
  EXPECT_TRUE(copy_cost_model({.bytes_per_s = 1e9}).differs_from(planned, 1.25));
}

}  // namespace
}  // namespace tp
