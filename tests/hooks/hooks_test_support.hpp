#pragma once
// Shared by the hooks tests: a fixture that leaves nothing installed, and
// readers for the figures the tests compare.

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "hooks/tensorpager.hpp"

namespace tp::hooks::testing {

/// Every test starts and ends with tensorpager uninstalled (CPU adapter).
class uninstalled_fixture : public ::testing::Test {
 protected:
  void SetUp() override { tensorpager::uninstall(); }
  void TearDown() override { tensorpager::uninstall(); }
};

/// One statistic of tensorpager::stats(); fails the test if the key is missing.
inline std::int64_t stat_of(const std::string& key) {
  const auto s = tensorpager::stats();
  const auto it = s.find(key);
  EXPECT_NE(it, s.end()) << "no statistic " << key;
  return it == s.end() ? -1 : it->second;
}

inline std::int64_t allocated_bytes() { return stat_of("allocated_bytes.all.current"); }
inline std::int64_t reserved_bytes() { return stat_of("reserved_bytes.all.current"); }

}  // namespace tp::hooks::testing
