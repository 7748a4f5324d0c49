// Fuzz regressions as literal operation lists (Note [Fuzz regressions are
// literal lists] in caching_allocator_fuzz_test.cpp), run by run_fuzz_ops on
// plain and expandable segments, and the tool that shrinks a dumped list.

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "caching_allocator_fuzz_ops.hpp"

namespace tp {
namespace {

using namespace tp::testing;

// Seed 658's one worker (3000 operations, once a pinned seed), shrunk to
// what still makes the allocator refuse an allocation after making room and
// give device memory back inside allocate() to fit the budget, with either
// segment kind (plain: cached segments released; expandable: free granules
// unmapped), and use a block on another stream, as the seed's row asserted.
const std::vector<fuzz_op>& ooms_and_frees_to_fit() {
  static const std::vector<fuzz_op> ops = {
#include "fuzz_regressions/ooms_and_frees_to_fit.inc"
  };
  return ops;
}

void expect_no_failure_counted(const fuzz_counts& c) {
  EXPECT_EQ(c.pattern_mismatches.load(), 0);
  EXPECT_EQ(c.invariant_failures.load(), 0);
  EXPECT_EQ(c.early_reuses.load(), 0);
}

class CachingAllocatorFuzzOps : public ::testing::TestWithParam<bool> {};

TEST_P(CachingAllocatorFuzzOps, OomsAndFreesToFitTheBudget) {
  fuzz_harness h(GetParam());
  run_fuzz_ops(h, ooms_and_frees_to_fit());
  expect_no_failure_counted(h.counts);
  EXPECT_GT(h.counts.ooms.load(), 0) << "the list no longer makes the allocator refuse an allocation";
  EXPECT_GT(h.counts.frees_to_fit.load(), 0) << "the list no longer makes allocate() give memory back to fit";
  EXPECT_GT(h.counts.uses.load(), 0);
  EXPECT_GT(h.counts.checked_copies.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Segments, CachingAllocatorFuzzOps, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Expandable" : "Plain"; });

TEST(FuzzOps, WrittenRowsReadBackTheSame) {
  const std::vector<fuzz_op> ops = {{fuzz_op::alloc, 7, 1 << 20, 3}, {fuzz_op::use, 7, 0, 1},
                                    {fuzz_op::check, 0, 1},           {fuzz_op::set_budget, 0, 256 << 20},
                                    {fuzz_op::empty_cache},           {fuzz_op::free, 7}};
  const std::string path = ::testing::TempDir() + "fuzz_ops_round_trip.inc";
  ASSERT_TRUE(write_fuzz_ops(path, ops, "a test"));
  const auto back = read_fuzz_ops(path);
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->size(), ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ((*back)[i].kind, ops[i].kind) << i;
    EXPECT_EQ((*back)[i].arg, ops[i].arg) << i;
    EXPECT_EQ((*back)[i].stream, ops[i].stream) << i;
  }
  std::remove(path.c_str());
}

// A counter of fuzz_counts by name, for TP_FUZZ_KEEP.
std::atomic<long> fuzz_counts::* counter_named(const std::string& name) {
  if (name == "ooms") return &fuzz_counts::ooms;
  if (name == "frees_to_fit") return &fuzz_counts::frees_to_fit;
  if (name == "budget_refusals") return &fuzz_counts::budget_refusals;
  if (name == "allocs_beside_pending_uses") return &fuzz_counts::allocs_beside_pending_uses;
  if (name == "uses") return &fuzz_counts::uses;
  if (name == "checked_copies") return &fuzz_counts::checked_copies;
  return nullptr;
}

// Whether `ops` still does what is kept, on both segment kinds: every counter
// named in `keep` above zero, or, for the word "failure", some check failing.
// Failures are intercepted, not reported.
bool still_does(const std::vector<fuzz_op>& ops, const std::vector<std::string>& keep) {
  for (const bool expandable : {false, true}) {
    ::testing::TestPartResultArray failures;
    fuzz_harness h(expandable);
    {
      const ::testing::ScopedFakeTestPartResultReporter intercept(
          ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
      run_fuzz_ops(h, ops);
    }
    for (const std::string& k : keep) {
      if (k == "failure" ? failures.size() == 0 : (h.counts.*counter_named(k)).load() == 0) return false;
    }
  }
  return true;
}

// Not a test: a tool. TP_FUZZ_SHRINK=in.inc TP_FUZZ_DUMP=out.inc
// TP_FUZZ_KEEP=ooms,frees_to_fit (counter names, or "failure") removes runs
// of operations, halving the run's length down to single operations, while
// the list keeps doing what TP_FUZZ_KEEP names, and writes what is left.
TEST(FuzzOps, ShrinkFromEnvironment) {
  const char* in = std::getenv("TP_FUZZ_SHRINK");
  const char* out = std::getenv("TP_FUZZ_DUMP");
  const char* keep_list = std::getenv("TP_FUZZ_KEEP");
  if (in == nullptr || out == nullptr || keep_list == nullptr) {
    GTEST_SKIP() << "a tool: set TP_FUZZ_SHRINK, TP_FUZZ_DUMP and TP_FUZZ_KEEP to shrink a dumped list";
  }
  std::vector<std::string> keep;
  std::stringstream names(keep_list);
  for (std::string k; std::getline(names, k, ',');) {
    ASSERT_TRUE(k == "failure" || counter_named(k) != nullptr) << "TP_FUZZ_KEEP: unknown counter " << k;
    keep.push_back(k);
  }
  auto ops = read_fuzz_ops(in);
  ASSERT_TRUE(ops.has_value()) << "cannot read " << in;
  ASSERT_TRUE(still_does(*ops, keep)) << in << " does not do " << keep_list << " to begin with";
  for (std::size_t chunk = ops->size() / 2; chunk >= 1; chunk /= 2) {
    for (std::size_t at = 0; at < ops->size();) {
      std::vector<fuzz_op> fewer(ops->begin(), ops->begin() + static_cast<long>(at));
      fewer.insert(fewer.end(), ops->begin() + static_cast<long>(std::min(at + chunk, ops->size())), ops->end());
      if (still_does(fewer, keep)) {
        *ops = std::move(fewer);
      } else {
        at += chunk;
      }
    }
  }
  ASSERT_TRUE(write_fuzz_ops(out, *ops, std::string("shrunk from ") + in + ", keeping " + keep_list));
  std::printf("%zu operations left, in %s\n", ops->size(), out);
}

}  // namespace
}  // namespace tp
