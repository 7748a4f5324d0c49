// Randomised operation sequences against the caching allocator on the
// simulated device: Note [Fuzz model] in caching_allocator_fuzz_run.hpp.
// Seed: TP_FUZZ_SEED, else random, printed. Length: TP_FUZZ_OPS (100000).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "caching_allocator_fuzz_run.hpp"

namespace tp {
namespace {

using namespace tp::testing;

std::uint64_t seed_from_env() {
  if (const char* s = std::getenv("TP_FUZZ_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() * 0x100000001ull + std::random_device{}();
}

long ops_from_env() {
  if (const char* s = std::getenv("TP_FUZZ_OPS")) return std::max(1L, std::strtol(s, nullptr, 10));
  return 100000;
}

void report(const char* name, std::uint64_t seed, const fuzz_counts& c) {
  std::printf("[%s] seed=%llu ops=%ld allocs=%ld frees=%ld uses=%ld checked_copies=%ld ooms=%ld "
              "budget_refusals=%ld pattern_mismatches=%ld invariant_failures=%ld early_reuses=%ld "
              "device_allocs=%ld device_frees=%ld\n",
              name, static_cast<unsigned long long>(seed), c.ops.load(), c.allocs.load(), c.frees.load(),
              c.uses.load(), c.checked_copies.load(), c.ooms.load(), c.budget_refusals.load(),
              c.pattern_mismatches.load(), c.invariant_failures.load(), c.early_reuses.load(), c.device_allocs,
              c.device_frees);
}

void expect_clean(const fuzz_counts& c) {
  EXPECT_EQ(c.pattern_mismatches.load(), 0);
  EXPECT_EQ(c.invariant_failures.load(), 0);
  EXPECT_EQ(c.early_reuses.load(), 0);
  EXPECT_GT(c.uses.load(), 0);
  EXPECT_GT(c.checked_copies.load(), 0);
}

class CachingAllocatorFuzz : public ::testing::TestWithParam<bool> {};

TEST_P(CachingAllocatorFuzz, OneWorkerCheckedAfterEveryStep) {
  const std::uint64_t seed = seed_from_env();
  SCOPED_TRACE("TP_FUZZ_SEED=" + std::to_string(seed));
  fuzz_run run(seed, 1, ops_from_env(), /*global_check_every=*/1, GetParam());
  run.run();
  report("1 worker", seed, run.counts);
  expect_clean(run.counts);
}

TEST_P(CachingAllocatorFuzz, FourWorkersFourStreams) {
  const std::uint64_t seed = seed_from_env();
  SCOPED_TRACE("TP_FUZZ_SEED=" + std::to_string(seed));
  fuzz_run run(seed, 4, ops_from_env(), /*global_check_every=*/64, GetParam());
  run.run();
  report("4 workers", seed, run.counts);
  expect_clean(run.counts);
}

// Seeds that once failed stay here as regression tests.
TEST_P(CachingAllocatorFuzz, RegressionSeeds) {
  for (const std::uint64_t seed : {1ull, 42ull}) {
    fuzz_run run(seed, 2, 5000, 8, GetParam());
    run.run();
    expect_clean(run.counts);
  }
}

INSTANTIATE_TEST_SUITE_P(Segments, CachingAllocatorFuzz, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Expandable" : "Plain"; });

}  // namespace
}  // namespace tp
