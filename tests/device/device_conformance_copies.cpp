// Cases every tp::device must pass (device_conformance.hpp): copies, their
// order on a stream and across streams, events and synchronisation.

#include "tests/device/device_conformance.hpp"

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "tests/device/conformance_buffers.hpp"

using namespace tp::testing::conformance;

TEST_P(DeviceConformance, RoundTripsHostDeviceHostBitIdentical) {
  const tp::stream_id s = dev_->create_stream();
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4099}, 3 * MiB + 123}) {
    host_buffer src(*dev_, bytes), out(*dev_, bytes);
    device_buffer d(*dev_, bytes);
    ASSERT_NE(src.get(), nullptr);
    ASSERT_NE(out.get(), nullptr);
    ASSERT_NE(d.get(), nullptr);
    src.fill_random(bytes);
    out.fill(0);
    dev_->copy_async(d.get(), src.get(), bytes, s);
    dev_->copy_async(out.get(), d.get(), bytes, s);
    dev_->synchronize(s);
    EXPECT_TRUE(out.same_as(src)) << bytes << " bytes";
  }
  dev_->destroy_stream(s);
}

TEST_P(DeviceConformance, CopiesDeviceToDeviceOnTheDefaultStream) {
  const std::size_t bytes = 5 * MiB + 7;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer a(*dev_, bytes), b(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && a.get() && b.get());
  src.fill_random(3);
  dev_->copy_async(a.get(), src.get(), bytes, tp::default_stream);
  dev_->copy_async(b.get(), a.get(), bytes, tp::default_stream);
  dev_->copy_async(out.get(), b.get(), bytes, tp::default_stream);
  dev_->synchronize(tp::default_stream);
  EXPECT_TRUE(out.same_as(src));
}

TEST_P(DeviceConformance, RunsCopiesOnOneStreamInOrder) {
  const std::size_t bytes = 16 * MiB;
  host_buffer a(*dev_, bytes), b(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(a.get() && b.get() && out.get() && d.get());
  a.fill(0xAA);
  b.fill(0xBB);
  const tp::stream_id s = dev_->create_stream();
  dev_->copy_async(d.get(), a.get(), bytes, s);
  dev_->copy_async(d.get(), b.get(), bytes, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->synchronize(s);
  EXPECT_TRUE(out.same_as(b));
  dev_->destroy_stream(s);
}

TEST_P(DeviceConformance, CompletesEventAfterSynchronize) {
  const std::size_t bytes = 8 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(4);
  const tp::stream_id s = dev_->create_stream();
  const tp::event_id e = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->record_event(e, s);
  dev_->synchronize_event(e);
  EXPECT_TRUE(dev_->query_event(e));
  EXPECT_TRUE(out.same_as(src));

  // Re-recording moves the event to the new point; synchronize(stream) covers it.
  dev_->copy_async(d.get(), out.get(), bytes, s);
  dev_->record_event(e, s);
  dev_->synchronize(s);
  EXPECT_TRUE(dev_->query_event(e));
  dev_->destroy_event(e);
  dev_->destroy_stream(s);
}

TEST_P(DeviceConformance, TreatsANeverRecordedEventAsComplete) {
  const tp::event_id e = dev_->create_event();
  EXPECT_TRUE(dev_->query_event(e));
  dev_->synchronize_event(e);
  dev_->stream_wait_event(tp::default_stream, e);
  dev_->synchronize(tp::default_stream);
  dev_->destroy_event(e);
}

TEST_P(DeviceConformance, StreamWaitEventOrdersWorkAcrossStreams) {
  const std::size_t bytes = 32 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(5);
  out.fill(0);
  const tp::stream_id s1 = dev_->create_stream(), s2 = dev_->create_stream();
  const tp::event_id e = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s1);
  dev_->record_event(e, s1);
  dev_->stream_wait_event(s2, e);
  dev_->copy_async(out.get(), d.get(), bytes, s2);
  dev_->synchronize(s2);  // covers s1's copy through the wait
  EXPECT_TRUE(out.same_as(src));
  EXPECT_TRUE(dev_->query_event(e));
  dev_->destroy_event(e);
  dev_->destroy_stream(s1);
  dev_->destroy_stream(s2);
}

TEST_P(DeviceConformance, DestroyingAStreamLetsItsPendingWorkFinish) {
  const std::size_t bytes = 8 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(6);
  const tp::stream_id s = dev_->create_stream();
  const tp::event_id e = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->record_event(e, s);
  dev_->destroy_stream(s);
  dev_->synchronize_event(e);
  EXPECT_TRUE(out.same_as(src));
  dev_->destroy_event(e);
}

TEST_P(DeviceConformance, CreatesAndDestroysManyStreamsAndEvents) {
  std::vector<tp::stream_id> streams;
  std::vector<tp::event_id> events;
  for (int i = 0; i < 64; ++i) {
    streams.push_back(dev_->create_stream());
    EXPECT_TRUE(dev_->is_stream(streams.back()));
    EXPECT_NE(streams.back(), tp::default_stream);
  }
  for (int i = 0; i < 256; ++i) events.push_back(dev_->create_event());
  EXPECT_EQ(std::set<tp::stream_id>(streams.begin(), streams.end()).size(), streams.size());
  EXPECT_EQ(std::set<tp::event_id>(events.begin(), events.end()).size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i)
    dev_->record_event(events[i], streams[i % streams.size()]);
  for (tp::stream_id s : streams) dev_->synchronize(s);
  for (tp::event_id e : events) EXPECT_TRUE(dev_->query_event(e));
  for (tp::event_id e : events) dev_->destroy_event(e);
  for (tp::stream_id s : streams) dev_->destroy_stream(s);
  EXPECT_TRUE(dev_->is_stream(tp::default_stream));
}

// synchronize(stream) returns with every op queued on that stream done: both
// records completed (no wait on either event) and the bytes are in place. On
// the simulated device's manual clock nothing retires until a blocking call
// moves time, so a synchronize that returned early fails here.
TEST_P(DeviceConformance, SynchronizeCompletesTheWorkQueuedOnItsStream) {
  const std::size_t bytes = 8 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(8);
  out.fill(0);
  const tp::stream_id s = dev_->create_stream();
  const tp::event_id copied_in = dev_->create_event(), copied_out = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s);
  dev_->record_event(copied_in, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->record_event(copied_out, s);
  dev_->synchronize(s);
  EXPECT_TRUE(dev_->query_event(copied_in));
  EXPECT_TRUE(dev_->query_event(copied_out));
  EXPECT_TRUE(out.same_as(src));
  dev_->destroy_event(copied_in);
  dev_->destroy_event(copied_out);
  dev_->destroy_stream(s);
}

// synchronize_device waits for every stream, one destroyed with work still
// queued included: what the allocator relies on when it unmaps the granules
// of a stream that is gone (Note [Giving memory back waits]).
TEST_P(DeviceConformance, SynchronizeDeviceCompletesTheWorkOfEveryStream) {
  const std::size_t bytes = 8 * MiB;
  host_buffer src(*dev_, bytes), out_a(*dev_, bytes), out_b(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out_a.get() && out_b.get() && d.get());
  src.fill_random(11);
  out_a.fill(0);
  out_b.fill(0);
  const tp::stream_id a = dev_->create_stream(), b = dev_->create_stream();
  const tp::event_id done_a = dev_->create_event(), done_b = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, a);
  dev_->record_event(done_a, a);
  dev_->stream_wait_event(b, done_a);
  dev_->copy_async(out_a.get(), d.get(), bytes, a);
  dev_->copy_async(out_b.get(), d.get(), bytes, b);
  dev_->record_event(done_b, b);
  dev_->destroy_stream(b);
  dev_->synchronize_device();
  EXPECT_TRUE(dev_->query_event(done_a));
  EXPECT_TRUE(dev_->query_event(done_b)) << "the destroyed stream's work was not waited for";
  EXPECT_TRUE(out_a.same_as(src));
  EXPECT_TRUE(out_b.same_as(src));
  dev_->destroy_event(done_a);
  dev_->destroy_event(done_b);
  dev_->destroy_stream(a);
}

// A stream with nothing pending (drained, never used, or the default stream)
// synchronizes without waiting on anything, leaves an event completed
// earlier completed and the bytes it covered as they were, and runs work
// queued on it afterwards. (That it returns at once, whatever other streams
// hold, is checked on the simulated device, whose clock shows it:
// SimulatedDevice.SynchronizingAnIdleStreamWaitsForNoOtherStream.)
TEST_P(DeviceConformance, SynchronizesAnIdleStream) {
  const std::size_t bytes = 4 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(9);
  out.fill(0);
  const tp::stream_id s = dev_->create_stream(), unused = dev_->create_stream();
  const tp::event_id e = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->record_event(e, s);
  dev_->synchronize_event(e);
  ASSERT_TRUE(out.same_as(src));
  for (const tp::stream_id idle : {s, unused, tp::default_stream}) {
    dev_->synchronize(idle);
    EXPECT_TRUE(dev_->query_event(e)) << "after synchronizing stream " << tp::to_underlying(idle);
  }
  EXPECT_TRUE(out.same_as(src));

  // Each still runs what is queued next: the bytes go back through the
  // stream never used, then out again on the default stream.
  src.fill_random(10);
  dev_->copy_async(d.get(), src.get(), bytes, unused);
  dev_->synchronize(unused);
  dev_->copy_async(out.get(), d.get(), bytes, tp::default_stream);
  dev_->synchronize(tp::default_stream);
  EXPECT_TRUE(out.same_as(src));
  dev_->destroy_event(e);
  dev_->destroy_stream(s);
  dev_->destroy_stream(unused);
}
