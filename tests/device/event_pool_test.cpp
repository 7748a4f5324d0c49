// event_pool on the simulated device, whose event ids count up from 1 and are
// never reused, and which rejects an id it does not know: so the test sees
// which events the pool created and which it destroyed.

#include "device/event_pool.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "core/clock.hpp"
#include "core/errors.hpp"
#include "device/simulated_device.hpp"

namespace {

class EventPool : public ::testing::Test {
 protected:
  // How many events dev_ created before this call: ids count up from 1 and
  // are never reused, so the id of one more tells.
  std::uintptr_t events_created() {
    const tp::event_id probe = dev_.create_event();
    dev_.destroy_event(probe);
    return tp::to_underlying(probe) - 1;
  }

  bool is_live(tp::event_id e) {
    try {
      dev_.query_event(e);
      return true;
    } catch (const tp::invalid_argument&) {
      return false;
    }
  }

  tp::manual_clock clock_;
  tp::simulated_device dev_{clock_};
};

}  // namespace

TEST_F(EventPool, CreatesAnEventOnlyWhenNoneIsFree) {
  tp::event_pool pool(dev_);
  const tp::event_id a = pool.take();
  const tp::event_id b = pool.take();
  EXPECT_NE(a, b);
  EXPECT_EQ(pool.created(), 2u);
  EXPECT_TRUE(is_live(a) && is_live(b));
  pool.give(a);
  EXPECT_EQ(pool.free_count(), 1u);
  EXPECT_EQ(pool.take(), a);
  EXPECT_EQ(pool.free_count(), 0u);
  EXPECT_EQ(pool.created(), 2u);
  EXPECT_EQ(events_created(), 2u);
}

TEST_F(EventPool, ReusesTheLastEventGivenBackFirst) {
  tp::event_pool pool(dev_);
  const tp::event_id a = pool.take(), b = pool.take(), c = pool.take();
  for (tp::event_id e : {b, a, c}) pool.give(e);
  EXPECT_EQ(pool.free_count(), 3u);
  for (tp::event_id e : {c, a, b}) EXPECT_EQ(pool.take(), e);
  const tp::event_id d = pool.take();  // none free: a new one
  EXPECT_EQ(std::set<tp::event_id>({a, b, c, d}).size(), 4u);
  EXPECT_EQ(pool.created(), 4u);
  EXPECT_EQ(events_created(), 4u);
}

TEST_F(EventPool, AReusedEventKeepsItsRecordUntilRecordedAgain) {
  tp::event_pool pool(dev_);
  const tp::stream_id s = dev_.create_stream();
  const tp::event_id e = pool.take();
  dev_.hold_stream(s);
  dev_.record_event(e, s);
  EXPECT_FALSE(dev_.query_event(e));
  pool.give(e);  // a pending event may be given back: its record stands
  ASSERT_EQ(pool.take(), e);
  EXPECT_FALSE(dev_.query_event(e));
  dev_.release_stream(s);
  EXPECT_TRUE(dev_.query_event(e));
  dev_.destroy_stream(s);
}

TEST_F(EventPool, DestructorDestroysExactlyTheEventsItCreated) {
  const tp::event_id before = dev_.create_event();  // not the pool's
  std::set<tp::event_id> created;
  {
    tp::event_pool pool(dev_);
    for (int i = 0; i < 5; ++i) created.insert(pool.take());
    pool.give(*created.begin());
    pool.give(*created.rbegin());
    pool.take();  // reused: creates nothing
    EXPECT_EQ(pool.created(), 5u);
    EXPECT_EQ(created.size(), 5u);
    for (tp::event_id e : created) EXPECT_TRUE(is_live(e));
  }
  // Taken and given back alike are gone; a second destroy of any of them
  // would have aborted (simulated_device::destroy_event checks the id).
  for (tp::event_id e : created) EXPECT_FALSE(is_live(e)) << tp::to_underlying(e);
  EXPECT_TRUE(is_live(before));
  EXPECT_EQ(events_created(), 6u);  // the five and `before`, nothing more
  dev_.destroy_event(before);
}

TEST_F(EventPool, AnUnusedPoolCreatesNothing) {
  { tp::event_pool pool(dev_); }
  EXPECT_EQ(events_created(), 0u);
}
