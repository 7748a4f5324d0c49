// cuda_adapter: record_stream (of any device's stream) and the entries trace
// trackers receive (allocations, frees, segments, out of memory).
//
// Note [Streams of another device]
// PyTorch's allocator accepts record_stream with a stream of another device
// than the tensor's: at the free it records an event on that stream, with the
// stream's device current, and keeps the block until the event completes.
// tensorpager's caching_allocator knows only its own device's streams and
// events (CUDA requires an event and the stream it is recorded on to share a
// context). So the adapter remembers such uses itself and, when the block is
// freed, turns them into one use by a stream of the block's own device:
//   1. on each foreign stream, record a fresh event (on that stream's device);
//   2. make the block's device's `cross_device_waits` stream wait on it
//      (cuStreamWaitEvent accepts an event of another device), and release
//      the event (the wait has captured it);
//   3. record_stream(block, cross_device_waits) with the allocator, then free.
// The allocator's own event on cross_device_waits then completes only after
// every foreign stream's work up to the free, so the block is reused, merged
// or returned to the device no sooner than PyTorch's would be. The free path
// pays for this only while some allocation has such a use (an atomic count).

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <c10/util/ApproximateClock.h>

#include "core/errors.hpp"
#include "hooks/c10_errors.hpp"
#include "hooks/cuda_adapter.hpp"

namespace tp::hooks {

using c10::CachingDeviceAllocator::TraceEntry;

namespace {
stream_id to_stream_id(cudaStream_t s) { return stream_id{reinterpret_cast<std::uintptr_t>(s)}; }
}  // namespace

void cuda_adapter::recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) {
  // Empty tensors have no memory; memory from elsewhere (allocated before
  // install, or shared by another process) is not ours to track.
  if (ptr.get() == nullptr || ptr.get_deleter() != &cuda_adapter::free_ptr) return;
  const c10::DeviceIndex device = ptr.device().index();
  caching_allocator* a = opened(device);
  TORCH_CHECK(a != nullptr, "tensorpager: record_stream on cuda:", device, ", which it never allocated on");
  const stream_id s = to_stream_id(stream.stream());
  if (stream.device_index() == device) {
    with_c10_errors([&] { a->record_stream(ptr.get(), s); });
    return;
  }
  // Note [Streams of another device].
  TORCH_CHECK(a->allocation_size(ptr.get()) != 0, "tensorpager: record_stream of ", ptr.get(),
              ", which is not allocated");
  with_c10_errors([&] { (void)allocator_for(stream.device_index()); });  // its events are recorded at the free
  std::lock_guard lock(cross_device_mutex_);
  auto& uses = cross_device_uses_[ptr.get()];
  for (const auto& [d, other] : uses) {
    if (d == stream.device_index() && other == s) return;
  }
  uses.emplace_back(stream.device_index(), s);
  cross_device_count_.fetch_add(1, std::memory_order_release);
}

void cuda_adapter::settle_cross_device_uses(c10::DeviceIndex device, caching_allocator& a, void* ptr) {
  std::vector<std::pair<c10::DeviceIndex, stream_id>> uses;
  {
    std::lock_guard lock(cross_device_mutex_);
    const auto it = cross_device_uses_.find(ptr);
    if (it == cross_device_uses_.end()) return;
    uses = std::move(it->second);
    cross_device_uses_.erase(it);
    cross_device_count_.fetch_sub(uses.size(), std::memory_order_release);
  }
  device_state& own = state_of(device);
  stream_id waits{};
  {
    std::lock_guard lock(open_mutex_);
    if (!own.cross_device_waits) own.cross_device_waits = own.dev->create_stream();
    waits = *own.cross_device_waits;
  }
  for (const auto& [other_device, other_stream] : uses) {
    tp::device& other = *state_of(other_device).dev;
    const event_id e = other.create_event();
    try {
      other.record_event(e, other_stream);
      own.dev->stream_wait_event(waits, e);
    } catch (...) {
      other.destroy_event(e);
      throw;
    }
    other.destroy_event(e);  // the wait captured the record
  }
  a.record_stream(ptr, waits);
}

// --- trace trackers ----------------------------------------------------------------

void cuda_adapter::trace(TraceEntry::Action action, c10::DeviceIndex device, std::size_t address,
                         std::size_t size, void* stream) {
  std::vector<AllocatorTraceTracker> trackers;
  {
    std::lock_guard lock(observers_mutex_);
    trackers = trace_trackers_;
  }
  const TraceEntry entry(action, device, address, size, stream, c10::MempoolId_t{0, 0}, c10::getApproximateTime());
  for (const auto& track : trackers) track(entry);
}

void cuda_adapter::attachAllocatorTraceTracker(AllocatorTraceTracker tracker) {
  std::lock_guard lock(observers_mutex_);
  trace_trackers_.push_back(std::move(tracker));
  has_trackers_.store(true);
}

// PyTorch calls its trackers for segments with its allocator's lock held, as
// the segment listener is called here; a tracker must not allocate.
void cuda_adapter::segment_tracer::on_segment_alloc(std::uintptr_t address, std::size_t bytes,
                                                    stream_id stream) noexcept {
  if (!adapter->has_trackers_.load(std::memory_order_relaxed)) return;
  try {
    adapter->trace(TraceEntry::SEGMENT_ALLOC, device, address, bytes, reinterpret_cast<void*>(to_underlying(stream)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorpager: a trace tracker failed on SEGMENT_ALLOC: %s\n", e.what());
  }
}

void cuda_adapter::segment_tracer::on_segment_free(std::uintptr_t address, std::size_t bytes,
                                                   stream_id stream) noexcept {
  if (!adapter->has_trackers_.load(std::memory_order_relaxed)) return;
  try {
    adapter->trace(TraceEntry::SEGMENT_FREE, device, address, bytes, reinterpret_cast<void*>(to_underlying(stream)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorpager: a trace tracker failed on SEGMENT_FREE: %s\n", e.what());
  }
}

}  // namespace tp::hooks
