// Sizes and ratios as the configuration grammar writes them
// (config/parse_bytes.hpp). The same executable as config_test.cpp.

#include "config/parse_bytes.hpp"

#include <random>

#include <gtest/gtest.h>

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = KiB * 1024;
constexpr std::size_t GiB = MiB * 1024;
constexpr std::size_t TiB = GiB * 1024;

TEST(ParseBytes, AcceptsEveryUnitCaseInsensitively) {
  EXPECT_EQ(tp::try_parse_bytes("4096"), 4096u);
  EXPECT_EQ(tp::try_parse_bytes("0"), 0u);
  EXPECT_EQ(tp::try_parse_bytes("7B"), 7u);
  EXPECT_EQ(tp::try_parse_bytes("100KB"), 100'000u);
  EXPECT_EQ(tp::try_parse_bytes("512MB"), 512'000'000u);
  EXPECT_EQ(tp::try_parse_bytes("12GB"), 12'000'000'000u);
  EXPECT_EQ(tp::try_parse_bytes("2TB"), 2'000'000'000'000u);
  EXPECT_EQ(tp::try_parse_bytes("3KiB"), 3 * KiB);
  EXPECT_EQ(tp::try_parse_bytes("512MiB"), 512 * MiB);
  EXPECT_EQ(tp::try_parse_bytes("12GiB"), 12 * GiB);
  EXPECT_EQ(tp::try_parse_bytes("2TiB"), 2 * TiB);
  EXPECT_EQ(tp::try_parse_bytes("12gib"), 12 * GiB);
  EXPECT_EQ(tp::try_parse_bytes("12GIB"), 12 * GiB);
  EXPECT_EQ(tp::try_parse_bytes("512mb"), 512'000'000u);
  EXPECT_EQ(tp::try_parse_bytes("  12 GiB\t"), 12 * GiB);
}

TEST(ParseBytes, FractionsWithAUnitRoundDown) {
  EXPECT_EQ(tp::try_parse_bytes("1.5GB"), 1'500'000'000u);
  EXPECT_EQ(tp::try_parse_bytes("1.5KiB"), 1536u);
  EXPECT_EQ(tp::try_parse_bytes("0.1KiB"), 102u);  // 102.4
  EXPECT_EQ(tp::try_parse_bytes("0.5B"), 0u);
  EXPECT_EQ(tp::try_parse_bytes("1.000000000000000000000001TiB"), TiB);
  EXPECT_EQ(tp::try_parse_bytes("0.99999999999999999999999999TiB"), TiB - 1);
}

TEST(ParseBytes, RejectsMalformedSizesWithAReason) {
  EXPECT_EQ(tp::parse_bytes("").error, tp::bytes_error::empty);
  EXPECT_EQ(tp::parse_bytes("-1GiB").error, tp::bytes_error::negative);
  EXPECT_EQ(tp::parse_bytes("GiB").error, tp::bytes_error::not_a_number);
  EXPECT_EQ(tp::parse_bytes("+5").error, tp::bytes_error::not_a_number);
  EXPECT_EQ(tp::parse_bytes("1.GiB").error, tp::bytes_error::not_a_number);
  EXPECT_EQ(tp::parse_bytes(".5GiB").error, tp::bytes_error::not_a_number);
  EXPECT_EQ(tp::parse_bytes("1.5").error, tp::bytes_error::fraction_without_unit);
  EXPECT_EQ(tp::parse_bytes("12G").error, tp::bytes_error::ambiguous_unit);
  EXPECT_EQ(tp::parse_bytes("12k").error, tp::bytes_error::ambiguous_unit);
  EXPECT_EQ(tp::parse_bytes("12GB B").error, tp::bytes_error::unknown_unit);
  EXPECT_EQ(tp::parse_bytes("12GB B").unit, "GB B");
  EXPECT_EQ(tp::parse_bytes("1e9").error, tp::bytes_error::unknown_unit);
  EXPECT_EQ(tp::parse_bytes("99999999999999999999").error, tp::bytes_error::overflow);
  EXPECT_EQ(tp::parse_bytes("20000000TiB").error, tp::bytes_error::overflow);
  EXPECT_EQ(tp::try_parse_bytes("12 gigs"), std::nullopt);
}

TEST(ParseBytes, RatiosNeedAPointAndLieInZeroToOne) {
  EXPECT_EQ(tp::try_parse_ratio("0.6"), 0.6);
  EXPECT_EQ(tp::try_parse_ratio("1.0"), 1.0);
  EXPECT_EQ(tp::try_parse_ratio(" 0.05 "), 0.05);
  EXPECT_EQ(tp::try_parse_ratio("1"), std::nullopt);
  EXPECT_EQ(tp::try_parse_ratio("0.0"), std::nullopt);
  EXPECT_EQ(tp::try_parse_ratio("1.5"), std::nullopt);
  EXPECT_EQ(tp::try_parse_ratio(".5"), std::nullopt);
  EXPECT_EQ(tp::try_parse_ratio("0.5GiB"), std::nullopt);
}

TEST(ParseBytes, ExactFormattingRoundTrips) {
  EXPECT_EQ(tp::format_size_exact(12 * GiB), "12GiB");
  EXPECT_EQ(tp::format_size_exact(512'000'000), "512MB");
  EXPECT_EQ(tp::format_size_exact(1536), "1536B");
  EXPECT_EQ(tp::format_size_exact(0), "0B");
  EXPECT_EQ(tp::format_ratio_exact(0.6), "0.6");
  EXPECT_EQ(tp::format_ratio_exact(1.0), "1.0");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::size_t bytes = rng() >> (rng() % 64);
    EXPECT_EQ(tp::try_parse_bytes(tp::format_size_exact(bytes)), bytes);
    const double ratio = std::uniform_real_distribution<double>(1e-12, 1.0)(rng);
    EXPECT_EQ(tp::try_parse_ratio(tp::format_ratio_exact(ratio)), ratio);
  }
}

}  // namespace
