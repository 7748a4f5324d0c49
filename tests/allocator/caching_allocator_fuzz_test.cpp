// Randomised operation sequences against the caching allocator on the
// simulated device: Note [Fuzz model] in caching_allocator_fuzz_run.hpp.
// Seed: TP_FUZZ_SEED, else random, printed. Length: TP_FUZZ_OPS, else
// TP_FUZZ_DEFAULT_OPS (100000; 30000 in a sanitized build).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "caching_allocator_fuzz_run.hpp"

namespace tp {
namespace {

using namespace tp::testing;

std::uint64_t seed_from_env() {
  if (const char* s = std::getenv("TP_FUZZ_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}() * 0x100000001ull + std::random_device{}();
}

#ifndef TP_FUZZ_DEFAULT_OPS
#define TP_FUZZ_DEFAULT_OPS 100000
#endif

long ops_from_env() {
  if (const char* s = std::getenv("TP_FUZZ_OPS")) return std::max(1L, std::strtol(s, nullptr, 10));
  return TP_FUZZ_DEFAULT_OPS;
}

void report(const char* name, std::uint64_t seed, const fuzz_counts& c) {
  std::printf("[%s] seed=%llu ops=%ld allocs=%ld frees=%ld uses=%ld checked_copies=%ld ooms=%ld "
              "budget_refusals=%ld pattern_mismatches=%ld invariant_failures=%ld early_reuses=%ld "
              "device_allocs=%ld device_frees=%ld frees_to_fit=%ld allocs_beside_pending_uses=%ld "
              "checks_after_a_worker_ended=%ld\n",
              name, static_cast<unsigned long long>(seed), c.ops.load(), c.allocs.load(), c.frees.load(),
              c.uses.load(), c.checked_copies.load(), c.ooms.load(), c.budget_refusals.load(),
              c.pattern_mismatches.load(), c.invariant_failures.load(), c.early_reuses.load(), c.device_allocs,
              c.device_frees, c.frees_to_fit.load(), c.allocs_beside_pending_uses.load(),
              c.checks_after_a_worker_ended.load());
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

// Note [Pinned fuzz seeds]
// No seed of this test is recorded as having failed: the commit messages,
// bench/results and the scripts name none, and the one fix the fuzz test led
// to (24c06cc: a worker's final frees raced another worker's invariant check,
// seen once under ASan in CI) came from an interleaving of threads, not from
// a seed. So the rows below are not regressions. Each is a run chosen for
// what it drives the allocator through, and asserts that through the run's
// counters: a row that stops covering it (after a change to the allocator or
// to the harness) fails, and is chosen again, instead of passing while it
// tests less. (It replaces seeds 1 and 42, which never failed and were kept
// for no stated reason.)
// With one worker a run is almost a function of its seed: only the driver
// thread's timing moves it. With four, the interleaving decides as much as
// the seed, so those rows assert only what every interleaving measured
// covered. Measured when chosen, 15 (658) and 20 (142) runs of each row per
// segment kind, two or three at a time, and 8 more under TSan; min..max:
//   658: ooms 3..7, frees_to_fit 26..47 (plain 33..47, expandable 26..29);
//   142: budget_refusals 9..29, checks_after_a_worker_ended 6..122,
//        allocs_beside_pending_uses 24..92; its ooms went down to 1, so
//        they are not asserted there.
// Seed 658 was the one worker's best of seeds 1..1000 for OOMs; 142 among
// the best of seeds 1..200 for budget refusals with four workers. Row 142
// opens the window of 24c06cc's race but cannot force it: with that fix
// undone, 1 run of 20 failed (statistics disagree with the blocks).
// A seed that fails in future is added as a row of its own, saying what it
// found.

// A counter of fuzz_counts that a row's run must end with above zero.
struct coverage {
  const char* name;
  std::atomic<long> fuzz_counts::*count;
};

struct pinned_seed {
  std::uint64_t seed;
  int workers;
  long ops;
  int check_every;
  const char* why;
  std::vector<coverage> covers;
};

const std::vector<pinned_seed>& pinned_seeds() {
  static const std::vector<pinned_seed> rows = {
      {658, 1, 3000, 1,
       "one worker under budget pressure, invariants after every step: allocations refused after the "
       "allocator made room, and device memory given back inside allocate() to fit the budget (plain: "
       "cached segments released; expandable: free granules unmapped)",
       {{"ooms", &fuzz_counts::ooms}, {"frees_to_fit", &fuzz_counts::frees_to_fit}}},
      {142, 4, 4000, 16,
       "four workers on four streams: set_budget refused while other workers hold blocks, invariant "
       "checks once another worker reached its final frees (the window of 24c06cc's race), "
       "allocations beside other streams' pending uses",
       {{"budget_refusals", &fuzz_counts::budget_refusals},
        {"checks_after_a_worker_ended", &fuzz_counts::checks_after_a_worker_ended},
        {"allocs_beside_pending_uses", &fuzz_counts::allocs_beside_pending_uses}}},
  };
  return rows;
}

TEST_P(CachingAllocatorFuzz, PinnedSeeds) {
  for (const pinned_seed& row : pinned_seeds()) {
    SCOPED_TRACE("pinned seed " + std::to_string(row.seed) + ": " + row.why);
    fuzz_run run(row.seed, row.workers, row.ops, row.check_every, GetParam());
    run.run();
    report("pinned", row.seed, run.counts);
    expect_clean(run.counts);
    for (const coverage& c : row.covers) {
      EXPECT_GT((run.counts.*c.count).load(), 0)
          << "the run no longer covers " << c.name << " (Note [Pinned fuzz seeds]): choose the row again";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Segments, CachingAllocatorFuzz, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Expandable" : "Plain"; });

}  // namespace
}  // namespace tp
