// Note [Reclaim rounds] and Note [Why a reclaim fell short]: the account on
// its own, without a runtime.

#include "runtime/reclaim_account.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace tp {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(ReclaimAccount, AnAllocationsFirstReclaimFreesWhatWasAsked) {
  reclaim_account a;
  EXPECT_EQ(a.begin(10 * MiB, 0), 10 * MiB);
  EXPECT_EQ(a.round(), 0u);
}

TEST(ReclaimAccount, EachFurtherRoundOfOneAllocationDoubles) {
  reclaim_account a;
  EXPECT_EQ(a.begin(10 * MiB, 3), 10 * MiB);
  EXPECT_EQ(a.begin(10 * MiB, 3), 20 * MiB);
  EXPECT_EQ(a.begin(5 * MiB, 3), 20 * MiB);  // the shortfall of round 2, doubled twice
  EXPECT_EQ(a.round(), 2u);
}

TEST(ReclaimAccount, AnotherAllocationStartsAtRoundZero) {
  reclaim_account a;
  a.begin(10 * MiB, 3);
  a.begin(10 * MiB, 3);
  EXPECT_EQ(a.begin(10 * MiB, 4), 10 * MiB);
  EXPECT_EQ(a.round(), 0u);
}

TEST(ReclaimAccount, TheTargetSaturates) {
  reclaim_account a;
  a.begin(SIZE_MAX / 2 + 1, 0);
  EXPECT_EQ(a.begin(SIZE_MAX / 2 + 1, 0), SIZE_MAX);
  for (int i = 0; i < 50; ++i) a.begin(1, 0);  // past a shift of 40
  EXPECT_EQ(a.begin(1, 0), std::size_t{1} << 40);
}

TEST(ReclaimAccount, TheOutcomeIsAgainstTheRequestNotTheDoubledTarget) {
  reclaim_account a;
  a.begin(10 * MiB, 0);
  a.begin(10 * MiB, 0);  // target 20 MiB
  a.held_elsewhere(3 * MiB);
  a.kept(2 * MiB);
  a.held_elsewhere(1 * MiB);
  const reclaim_outcome o = a.outcome(7 * MiB);
  EXPECT_EQ(o.asked, 10 * MiB);
  EXPECT_EQ(o.freed, 7 * MiB);
  EXPECT_EQ(o.held, 4 * MiB);
  EXPECT_EQ(o.kept, 2 * MiB);
}

TEST(ReclaimAccount, EachReclaimStartsItsAccountAfresh) {
  reclaim_account a;
  a.begin(MiB, 0);
  a.held_elsewhere(MiB);
  a.kept(MiB);
  a.begin(MiB, 0);
  const reclaim_outcome o = a.outcome(0);
  EXPECT_EQ(o.held, 0u);
  EXPECT_EQ(o.kept, 0u);
}

TEST(PublishedReclaim, ReadsBackWhatWasStored) {
  published_reclaim p;
  EXPECT_EQ(p.load().asked, 0u);
  p.store({.asked = 1, .freed = 2, .held = 3, .kept = 4});
  const reclaim_outcome o = p.load();
  EXPECT_EQ(o.asked, 1u);
  EXPECT_EQ(o.freed, 2u);
  EXPECT_EQ(o.held, 3u);
  EXPECT_EQ(o.kept, 4u);
}

TEST(DescribeShortfall, SaysNothingOfAReclaimThatFreedWhatItWasAsked) {
  EXPECT_EQ(describe_shortfall({}), "");
  EXPECT_EQ(describe_shortfall({.asked = MiB, .freed = MiB, .held = MiB}), "");
  EXPECT_EQ(describe_shortfall({.asked = MiB, .freed = 2 * MiB}), "");
}

TEST(DescribeShortfall, NamesWhatTheReclaimHadToLeave) {
  const std::string held = describe_shortfall({.asked = 8 * MiB, .freed = 0, .held = 3 * MiB});
  EXPECT_NE(held.find("its last reclaim was asked for"), std::string::npos) << held;
  EXPECT_NE(held.find("held elsewhere"), std::string::npos) << held;
  EXPECT_EQ(held.find("could neither be swapped"), std::string::npos) << held;
  const std::string kept = describe_shortfall({.asked = 8 * MiB, .freed = MiB, .kept = 3 * MiB});
  EXPECT_NE(kept.find("could neither be swapped"), std::string::npos) << kept;
  EXPECT_NE(kept.find("'host_budget'"), std::string::npos) << kept;
  EXPECT_EQ(kept.find("held elsewhere"), std::string::npos) << kept;
  const std::string none = describe_shortfall({.asked = 8 * MiB, .freed = MiB});
  EXPECT_NE(none.find("nothing else was evictable"), std::string::npos) << none;
}

}  // namespace
}  // namespace tp
