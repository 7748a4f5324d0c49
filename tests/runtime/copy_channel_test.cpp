// detail::copy_channel, the step planner's fluid model of one copy
// direction (runtime/copy_channel.hpp): buckets of 1000 ns with room for
// 700 ns each (derate 0.7).

#include "runtime/copy_channel.hpp"

#include <gtest/gtest.h>

namespace tp::detail {
namespace {

TEST(CopyChannel, ForwardFillsFromReadyAcrossBucketsAtTheDeratedRate) {
  copy_channel c(1000, 0.7);
  EXPECT_EQ(c.forward(0, 700, false), 700);     // one bucket's room
  EXPECT_EQ(c.forward(0, 1000, false), 1300);   // 700 in [0, 1000), 300 in the next
  EXPECT_EQ(c.forward(500, 700, false), 1200);  // 500 left in the first bucket
  EXPECT_EQ(c.forward(-50, 100, false), 100);   // time before 0 counts from 0
}

TEST(CopyChannel, BackwardEndsByTheDeadlineOrFindsNoRoom) {
  copy_channel c(1000, 0.7);
  EXPECT_EQ(c.backward(2000, 700, false), 1300);
  EXPECT_EQ(c.backward(2000, 1000, false), 700);  // 700 in [1000, 2000), 300 before
  EXPECT_FALSE(c.backward(1000, 800, false));     // one bucket before the deadline
  EXPECT_FALSE(c.backward(0, 1, false));
}

TEST(CopyChannel, OnlyACommittedCopyTakesChannelTime) {
  copy_channel c(1000, 0.7);
  EXPECT_EQ(c.forward(0, 700, true), 700);
  EXPECT_EQ(c.forward(0, 100, false), 1100);  // the first bucket is full
  EXPECT_EQ(c.forward(0, 100, false), 1100);  // a look changes nothing
  ASSERT_EQ(c.backward(3000, 700, true), 2300);
  EXPECT_EQ(c.backward(3000, 100, false), 1900);  // [2000, 3000) is full
  EXPECT_FALSE(c.backward(1000, 1, false));       // and so is [0, 1000)
}

}  // namespace
}  // namespace tp::detail
