#pragma once
// tp::caching_allocator: a stream-ordered caching allocator over tp::device,
// with a budget on reserved bytes and a reclaim hook.
//
// Note [Stream-ordered reuse]
// A block belongs to the stream it was allocated on. Freed, it is reusable on
// that stream at once: later work on the stream is ordered after the work that
// used it. If record_stream() named other streams, the free records an event
// on each of them and the block stays "active, pending free" until every event
// has completed; only then can it be reused or merged. Blocks are never handed
// to another stream from the cache; a segment freed by empty_cache() returns
// to the device and can come back on any stream.
//
// Note [Reclaim]
// An allocation first tries the cache, then a new segment within the budget
// and the device's free memory. If both fail it (1) waits for pending stream
// events and releases every fully free cached segment, retries; (2) asks the
// registered reclaimer for the shortfall, releases what that freed, retries,
// and asks again while the reclaimer frees something (at most
// max_reclaim_rounds times: freed bytes can be scattered through segments
// still partly in use); and only then throws tp::out_of_memory. Waiting and reclaiming happen with
// the lock released, so other threads (and the reclaimer itself) can free.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator/allocator_trace.hpp"
#include "allocator/block.hpp"
#include "allocator/memory_stats.hpp"
#include "allocator/reclaimer.hpp"
#include "allocator/segment_listener.hpp"
#include "allocator/snapshot.hpp"
#include "device/device.hpp"

namespace tp {

struct caching_allocator_options {
  /// Cap on reserved bytes; none means only the device's memory limits it.
  std::optional<std::size_t> budget;
  /// Cached blocks of this size or more are never split (PyTorch's
  /// max_split_size_mb). The default, SIZE_MAX, splits everything.
  std::size_t max_split_size = SIZE_MAX;
};

/// A caching allocator for one device.
///
/// Thread-safety: every member may be called from any thread.
/// Streams: see Note [Stream-ordered reuse].
/// Lifetime: the device must outlive the allocator. Destroying the allocator
/// waits for pending events and returns every segment to the device; pointers
/// still allocated then become invalid.
class caching_allocator {
 public:
  using options = caching_allocator_options;
  /// Note [Reclaim]: how many times one allocation asks the reclaimer.
  static constexpr int max_reclaim_rounds = 16;

  explicit caching_allocator(device& dev, options opts = {});
  ~caching_allocator();
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  /// Returns at least `bytes` of device memory for use on `stream`, aligned
  /// to 512 bytes; nullptr for 0 bytes. Throws tp::invalid_argument for a
  /// stream the device does not know, tp::out_of_memory after Note [Reclaim].
  void* allocate(std::size_t bytes, stream_id stream = default_stream);

  /// Frees a pointer from allocate(); nullptr is ignored. Throws
  /// tp::invalid_argument, changing nothing, for a pointer this allocator
  /// does not hold (a double free or a foreign pointer).
  void deallocate(void* ptr);

  /// Declares that `stream` also uses the allocation at `ptr`, so its memory
  /// is not reused before the work enqueued on `stream` up to the free has
  /// completed. Throws tp::invalid_argument for an unknown pointer or stream.
  void record_stream(void* ptr, stream_id stream);

  /// Waits for pending events, then returns every fully free segment to the
  /// device.
  void empty_cache();

  /// Sets or clears the cap on reserved bytes. Lowering it releases cached
  /// segments as needed; if what is still in use exceeds the new budget it
  /// throws tp::invalid_argument and the old budget stays.
  void set_budget(std::optional<std::size_t> bytes);
  std::optional<std::size_t> budget() const;

  /// Registers the reclaimer of Note [Reclaim] (nullptr: none). Not owned.
  void set_reclaimer(reclaimer* r);

  /// Makes the allocator record its events into `t` (Note [Allocator
  /// trace]; nullptr: stop). Not owned; detach it before destroying it. Once
  /// this returns, no record is on its way into the previous trace.
  void set_trace(allocator_trace* t);

  /// Tells `l` about every segment taken from or returned to the device from
  /// now on (nullptr: stop). Not owned; detach it before destroying it. Once
  /// this returns, no call to the previous listener is under way.
  void set_segment_listener(segment_listener* l);

  /// The size of the block behind an allocated pointer, or 0 if unknown.
  std::size_t allocation_size(const void* ptr) const;

  allocator_stats stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  /// Segments and their blocks, by address.
  std::vector<segment_snapshot> snapshot() const;
  /// The largest cached free block (PyTorch's cacheInfo).
  std::size_t largest_free_block() const;

  device& dev() const { return device_; }
  std::size_t max_split_size() const { return max_split_size_; }

 private:
  using lock_type = std::unique_lock<std::mutex>;
  struct pending_event {
    event_id event;
    detail::block* block;
  };

  detail::block* try_allocate_block(std::size_t size, stream_id stream);
  detail::block* take_free_block(pool_kind pool, std::size_t size, stream_id stream);
  detail::block* allocate_segment(pool_kind pool, std::size_t size, stream_id stream);
  bool fits_budget(std::size_t bytes) const;
  std::size_t shortfall(std::size_t size) const;
  void* hand_out(detail::block* b, std::size_t size, std::size_t requested);
  void free_block(detail::block* b, allocator_event_kind kind);
  void merge_into(detail::block* b, detail::block* neighbour);
  void insert_events(detail::block* b);
  void process_events();
  void wait_for_pending_events(lock_type& lock);
  std::size_t release_cached_segments();
  void check_stream(stream_id stream);
  std::size_t largest_free_block_locked() const;
  [[noreturn]] void throw_oom(std::size_t bytes, stream_id stream, std::size_t reclaimed,
                              bool larger_than_device);
  detail::block_pool& pool_of(pool_kind p) { return p == pool_kind::small ? small_blocks_ : large_blocks_; }
  event_id take_event();
  /// Records an event when a trace is attached (Note [Allocator trace]):
  /// inline, since it runs inside every allocate and free.
  void notify(allocator_event_kind kind, const detail::block* b, std::size_t bytes, std::size_t detail = 0,
              stream_id stream = default_stream) noexcept {
    if (trace_ == nullptr) return;
    allocator_record* r = trace_->claim();
    if (r == nullptr) return;
    r->time = trace_->stamp();
    r->address = b != nullptr ? b->address : 0;
    r->bytes = bytes;
    r->detail = detail;
    r->allocated_bytes = stats_.allocated_bytes.all().current;
    r->reserved_bytes = stats_.reserved_bytes.all().current;
    r->stream = to_underlying(b != nullptr ? b->stream : stream);
    r->context = kind == allocator_event_kind::alloc ? trace_->context() : 0;
    r->kind = kind;
    r->pool = b != nullptr ? b->pool : pool_kind::small;
    trace_->publish(r);
  }

  device& device_;
  const std::size_t max_split_size_;
  const std::size_t device_total_;

  mutable std::mutex mutex_;
  std::optional<std::size_t> budget_;
  reclaimer* reclaimer_ = nullptr;
  allocator_trace* trace_ = nullptr;
  segment_listener* segment_listener_ = nullptr;
  detail::block_pool small_blocks_;
  detail::block_pool large_blocks_;
  std::unordered_map<std::uintptr_t, detail::block*> allocated_;
  std::map<std::uintptr_t, std::unique_ptr<detail::segment>> segments_;
  std::vector<stream_id> known_streams_;
  std::vector<std::pair<stream_id, std::deque<pending_event>>> pending_;  // per recording stream
  std::size_t pending_count_ = 0;
  std::vector<event_id> free_events_;
  std::vector<event_id> all_events_;
  allocator_stats stats_;
};

}  // namespace tp
