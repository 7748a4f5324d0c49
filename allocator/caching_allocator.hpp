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
// With expandable segments, "releases" means unmapping free granules, and it
// comes before the reclaimer in every round: Note [Expandable segments].
//
// Note [Expandable segments]
// PyTorch's expandable_segments, built on the device's virtual-memory calls
// (reserve / try_map / unmap / release). Each (stream, pool) owns a reserved
// address range, as large as the device (9/8 of it, as PyTorch reserves, at
// most 256 GiB), and grows by mapping granules (device::granularity(): 2 MiB
// on CUDA) where a request needs them; reserved bytes are mapped bytes, and
// the budget caps them. Blocks there are mapped (allocated or free, as in a
// plain segment) or unmapped (address space only, granule-aligned, kept in
// the segment's `unmapped` set, never in a pool, never merged with mapped
// ones). Every remainder of a split is kept (should_split's expandable rule).
//   Growth: when no cached block fits, the cheapest place to map is chosen
// among the segment's unmapped blocks U (plan_growth): the prefix of U after
// a free mapped block L (L + part of U), the suffix of U before a free mapped
// block R, or all of U between L and R; cost = the granules to map. The
// mapped range merges with L and R into one free block that serves the
// request; a new segment is reserved only when no U has room.
//   Pressure: a free mapped block's whole granules can be unmapped, and that
// physical memory mapped where the request needs it. When growth does not
// fit the budget (or the device), make_room() takes the cheapest plan that
// unmapping can pay for (Note [Plans the budget can pay for]) and unmaps free
// granules elsewhere, largest free blocks first, sparing the blocks the plan
// builds on, until the plan fits; only then is the reclaimer asked, for what
// is still missing.
// Partly used granules stay mapped: what an expandable segment cannot give
// back is at most one granule per free range.
//   Less than a granule: when the budget has room for a request but not for
// the granules it would map (a budget of 1 MiB, a 4 KiB tensor), the request
// gets a plain segment of its own size (allocate_plain_fallback); plain
// segments are released when wholly free, as always. The same fallback
// catches any growth plan that maps more than the budget allows while a
// plain segment of the request's size would fit.
//   Accounting: reserved_bytes counts mapped bytes; `segment` counts mapped
// ranges (a snapshot shows each contiguous mapped range as a segment, as
// PyTorch's does); num_device_alloc / num_device_free count map / unmap
// calls; each call is a segment_map / segment_unmap record (Note [Allocator
// events]). empty_cache() unmaps every free granule and releases segments
// with nothing mapped.
//
// Note [Long-lived placement]
// A budget caps mapped bytes, and a granule that holds any allocated byte
// stays mapped. So a tensor that lives across steps (a parameter, its
// gradient, an optimizer's moment) placed among a step's activations keeps
// the granules it shares with them mapped after they are freed: the next
// step finds those bytes free but in pieces of less than a granule, which no
// large request can use and no unmap gives back. A torchvision ResNet-18
// (SGD momentum, zero_grad() before backward) under manage:all at 0.7 of its
// peak died in its fourth step's forward with 14 MiB free in such pieces and
// 16 MiB asked for, 2 MiB over the budget; its gradients and momentum
// buffers had come back from lending one by one, wherever a free block fit.
// So allocate() takes the lifetime the caller expects: long-lived requests
// have segments (and free blocks) of their own, apart from the transient
// ones, as PyTorch's private pools are apart from its default one. The
// long-lived ones pack together, and what strands is at most the last
// granule of each of their ranges; the transient ones free whole granules.
// Free memory moves between the two by unmapping (Note [Expandable
// segments]; with plain segments, a wholly free segment), and the lifetimes
// are a preference, not a wall: a request that neither its own blocks nor
// growth can serve takes a free block of the other lifetime before the
// reclaimer is asked to evict anything. try_allocate() never borrows: it
// serves moves into long-lived blocks, which a borrowed block would defeat.
// Small requests (1 MiB or less) are transient whatever the caller expects:
// the small pool shares its granules by design (2 MiB serve many), and a
// long-lived small pool would hold a partly used granule of its own, as
// much as a small model's whole state; with it, a 17 MiB MLP step that fit
// its budget by dropping activations ran out of memory (tests/python/
// autograd_cases.py). The separation costs at most a partly used granule of
// the long-lived large pool (2 MiB on CUDA), and a move's copy. Who asks: the
// budget runtime, for what lending gives back (Note [Lent storages come back
// packed] in hooks/budget/saved_storage.hpp). Everything else is transient.
//
// Note [Giving memory back waits]
// Memory the cache holds may still be used by work the host queued on the
// block's stream: a free is stream-ordered (Note [Stream-ordered reuse]), so
// the host never waited for it. Giving the memory back to the device needs
// that work finished, and the host waits for it, which stops it queueing
// work ahead. How long and for what:
//   - a plain segment: cudaFree waits for the whole device (every stream:
//     compute, copies, NCCL), and so does device::deallocate;
//   - granules of an expandable segment: the allocator waits for the
//     segment's stream only (device::synchronize), once per stream per
//     unmapping pass, then unmaps (device::unmap expects idle memory), as
//     PyTorch's expandable segments wait for their stream. Other streams'
//     uses of the memory were events (record_stream), complete already since
//     only free blocks are unmapped.
// Each wait counts in num_device_syncs (memory_stats' key
// "tensorpager.num_device_syncs") and is a device_sync record. The cache
// gives memory back only on empty_cache, set_budget and the slow path of an
// allocation that neither the cache nor growth can serve, so a steady state
// under a budget that fits makes none: the allocator also asks the device for
// its free memory (cudaMemGetInfo) only on that slow path, and growth within
// the budget just tries to map.

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

#include "allocator/allocator_log.hpp"
#include "allocator/block.hpp"
#include "allocator/memory_stats.hpp"
#include "allocator/reclaimer.hpp"
#include "allocator/runtime_allocator.hpp"
#include "allocator/segment_listener.hpp"
#include "allocator/snapshot.hpp"
#include "device/device.hpp"
#include "device/event_pool.hpp"

namespace tp {

struct caching_allocator_options {
  /// Cap on reserved bytes; none means only the device's memory limits it.
  std::optional<std::size_t> budget;
  /// Cached blocks of this size or more are never split (PyTorch's
  /// max_split_size_mb). The default, SIZE_MAX, splits everything.
  std::size_t max_split_size = SIZE_MAX;
  /// Note [Expandable segments]. Requires a device with virtual memory
  /// (device::granularity() must not throw, and returns a power of two;
  /// construction throws tp::invalid_argument otherwise).
  bool expandable_segments = false;
};

/// A caching allocator for one device.
///
/// Thread-safety: every member may be called from any thread.
/// Streams: see Note [Stream-ordered reuse].
/// Lifetime: the device must outlive the allocator. Destroying the allocator
/// waits for pending events and returns every segment to the device; pointers
/// still allocated then become invalid.
/// The budget runtime uses it through runtime_allocator.
class caching_allocator final : public runtime_allocator {
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
  /// `life` chooses the segments it comes from: Note [Long-lived placement].
  void* allocate(std::size_t bytes, stream_id stream = default_stream, lifetime life = lifetime::transient);
  /// As allocate(), but never asks the reclaimer: nullptr where allocate()
  /// would (Note [Reclaim], step 2), after the cache, growth and releasing
  /// what the cache holds. For a move that is worth making only when it
  /// costs no eviction.
  void* try_allocate(std::size_t bytes, stream_id stream, lifetime life);

  /// Frees a pointer from allocate(); nullptr is ignored. Requires: ptr came
  /// from allocate() and is not freed yet; a double free or a foreign pointer
  /// ends the process with a message (tp::fail_fast), as free() does. Callers
  /// that can be handed foreign pointers ask allocation_size() first.
  void deallocate(void* ptr) noexcept;

  /// Declares that `stream` also uses the allocation at `ptr`, so its memory
  /// is not reused before the work enqueued on `stream` up to the free has
  /// completed. Throws tp::invalid_argument for an unknown pointer or stream.
  void record_stream(void* ptr, stream_id stream) override;

  /// Waits for pending events, then returns every fully free segment to the
  /// device.
  void empty_cache();

  /// Sets or clears the cap on reserved bytes. Lowering it releases cached
  /// segments as needed; if what is still in use exceeds the new budget it
  /// throws tp::invalid_argument and the old budget stays.
  void set_budget(std::optional<std::size_t> bytes);
  std::optional<std::size_t> budget() const override;

  /// Registers the reclaimer of Note [Reclaim] (nullptr: none). Not owned.
  void set_reclaimer(reclaimer* r) override;

  /// Makes the allocator record its events into `t` (Note [Allocator
  /// log]; nullptr: stop). Not owned; detach it before destroying it. Once
  /// this returns, no record is on its way into the previous log.
  void set_log(allocator_log* t);

  /// Tells `l` about every segment taken from or returned to the device from
  /// now on (nullptr: stop). Not owned; detach it before destroying it. Once
  /// this returns, no call to the previous listener is under way.
  void set_segment_listener(segment_listener* l);

  /// The size of the block behind an allocated pointer, or 0 if unknown.
  std::size_t allocation_size(const void* ptr) const override;
  /// The lifetime an allocated pointer was allocated for (Note [Long-lived
  /// placement]); nullopt for a pointer this allocator does not hold.
  std::optional<lifetime> lifetime_of(const void* ptr) const;

  allocator_stats stats() const override;
  void reset_peak_stats();
  void reset_accumulated_stats();
  /// Segments and their blocks, by address.
  std::vector<segment_snapshot> snapshot() const;
  /// The largest cached free block (PyTorch's cacheInfo).
  std::size_t largest_free_block() const;
  std::size_t stranded_bytes() const override;
  std::size_t granularity() const override { return granularity_; }

  device& dev() const { return device_; }
  std::size_t max_split_size() const { return max_split_size_; }
  bool expandable_segments() const { return expandable_; }

 private:
  using lock_type = std::unique_lock<std::mutex>;
  /// runtime_allocator's only: the runtime's Note [Resident floor].
  allocated_marks take_allocated_high_water() override;
  /// The free bytes blocks in use hold mapped (runtime_allocator::
  /// stranded_bytes()), and the blocks in use beside those of expandable
  /// segments, by lifetime, each counted once (for an out-of-memory report).
  struct stranded_figures {
    std::size_t in_granules = 0;        // expandable segments: outside whole granules
    std::size_t in_plain_segments = 0;  // plain segments with a block in use
    std::size_t beside_transient = 0;
    std::size_t beside_long_lived = 0;
  };
  stranded_figures stranded_locked() const;
  struct pending_event {
    event_id event;
    detail::block* block;
  };

  /// Where an expandable segment would grow for a request (Note
  /// [Expandable segments]): map [begin, end) inside `unmapped`, building on
  /// the free mapped neighbours `left` / `right` (nullptr: not used).
  /// `unmapped` is nullptr for a new segment; cost = end - begin.
  struct growth_plan {
    detail::segment* seg = nullptr;
    detail::block* unmapped = nullptr;
    detail::block* left = nullptr;
    detail::block* right = nullptr;
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    std::size_t cost() const { return end - begin; }
  };

  void* allocate(std::size_t bytes, stream_id stream, lifetime life, bool may_reclaim);
  // caching_allocator_blocks.cpp: the pools, plain segments, the budget.
  detail::block* try_allocate_block(std::size_t size, stream_id stream, lifetime life);
  // The last resort of a small request (Note [Small requests from large
  // blocks] in caching_allocator_blocks.cpp); nullptr for a large one.
  detail::block* take_large_for_small(std::size_t size, stream_id stream, lifetime life);
  // The last resort of a large request that may reclaim (the same Note);
  // nullptr for a small one.
  detail::block* take_small_for_large(std::size_t size, stream_id stream);
  detail::block* take_free_block(pool_kind pool, std::size_t size, stream_id stream, lifetime life);
  detail::block* take_stranded_block(std::size_t size, stream_id stream, lifetime life);
  detail::block* borrow_block(std::size_t size, stream_id stream, lifetime life);
  detail::block* allocate_segment(pool_kind pool, std::size_t size, stream_id stream, lifetime life);
  bool fits_budget(std::size_t bytes) const;
  std::size_t budget_room() const;
  std::size_t headroom() const;
  std::size_t shortfall(std::size_t size, stream_id stream, lifetime life) const;
  void* hand_out(detail::block* b, std::size_t size, std::size_t requested);
  std::size_t carve_offset(const detail::block& b, std::size_t size) const;
  static detail::block* split_front(detail::block* b, std::size_t bytes);
  static detail::block* split_back(detail::block* b, std::size_t size);
  static detail::block* split_off(const detail::block& b, std::uintptr_t address, std::size_t size);
  void free_block(detail::block* b, allocator_event_kind kind);
  void cache_block(detail::block* b);
  void merge_into(detail::block* b, detail::block* neighbour);
  void absorb(detail::block* b, detail::block* neighbour);
  void pool_insert(detail::block* b);
  void pool_erase(detail::block* b);
  std::size_t release_cached_segments();
  void make_room(std::size_t size, stream_id stream, lifetime life);
  detail::block* allocate_plain_fallback(std::size_t size, stream_id stream, lifetime life);
  // caching_allocator_events.cpp: stream-ordered frees.
  // Never throws: Note [A free that cannot record its events].
  void insert_events(detail::block* b);
  void process_events();
  void wait_for_pending_events(lock_type& lock);
  // caching_allocator_expandable.cpp: Note [Expandable segments].
  std::optional<growth_plan> plan_growth(pool_kind pool, std::size_t size, stream_id stream, lifetime life,
                                         std::size_t room) const;
  std::size_t unmappable_bytes() const;
  detail::block* grow_expandable(pool_kind pool, std::size_t size, stream_id stream, lifetime life);
  detail::block* map_range(const growth_plan& plan);
  std::size_t unmap_free_granules(std::size_t want, const growth_plan* spare);
  void unmap_interior(detail::block* b, std::uintptr_t begin, std::uintptr_t end);
  detail::block* merge_unmapped(detail::block* u);
  void release_empty_expandable_segments();
  // A segment or granules for a request: Note [Virtual memory that fails].
  detail::block* grow(pool_kind pool, std::size_t size, stream_id stream, lifetime life);
  void destroy_expandable_segment(detail::segment& seg) noexcept;
  void count_mapped_ranges(const detail::block* b, bool mapping);
  // caching_allocator.cpp and caching_allocator_inspection.cpp
  void check_stream(stream_id stream);
  std::size_t largest_free_block_locked() const;
  static segment_snapshot snapshot_range(const detail::segment& seg, const detail::block* first,
                                         const detail::block* end, std::size_t total);
  [[noreturn]] void throw_oom(std::size_t bytes, stream_id stream, std::size_t reclaimed,
                              bool larger_than_device);
  detail::block_pool& pool_of(pool_kind p) { return p == pool_kind::small ? small_blocks_ : large_blocks_; }
  /// Records an event when a log is attached (Note [Allocator log]):
  /// inline, since it runs inside every allocate and free.
  void notify(allocator_event_kind kind, const detail::block* b, std::size_t bytes, std::size_t detail = 0,
              stream_id stream = default_stream) noexcept {
    if (log_ == nullptr) return;
    allocator_record* r = log_->claim();
    if (r == nullptr) return;
    r->time = log_->stamp();
    r->address = b != nullptr ? b->address : 0;
    r->bytes = bytes;
    r->detail = detail;
    r->allocated_bytes = stats_.allocated_bytes.all().current;
    r->reserved_bytes = stats_.reserved_bytes.all().current;
    r->stream = to_underlying(b != nullptr ? b->stream : stream);
    r->context = kind == allocator_event_kind::alloc ? log_->context() : 0;
    r->kind = kind;
    r->pool = b != nullptr ? b->pool : pool_kind::small;
    log_->publish(r);
  }

  device& device_;
  const std::size_t max_split_size_;
  const std::size_t device_total_;
  const bool expandable_;
  const std::size_t granularity_;       // expandable: the device's map granule; else 0
  const std::size_t reservation_size_;  // expandable: the address space of a new segment

  mutable std::mutex mutex_;
  std::optional<std::size_t> budget_;
  reclaimer* reclaimer_ = nullptr;
  allocator_log* log_ = nullptr;
  segment_listener* segment_listener_ = nullptr;
  detail::block_pool small_blocks_;
  detail::block_pool large_blocks_;
  std::unordered_map<std::uintptr_t, detail::block*> allocated_;
  std::map<std::uintptr_t, std::unique_ptr<detail::segment>> segments_;
  std::vector<stream_id> known_streams_;
  std::vector<std::pair<stream_id, std::deque<pending_event>>> pending_;  // per recording stream
  std::size_t pending_count_ = 0;
  event_pool events_{device_};  // Note [Stream-ordered reuse]
  bool quarantine_reported_ = false;  // Note [A free that cannot record its events]
  bool vmm_failed_ = false;           // Note [Virtual memory that fails]
  allocator_stats stats_;
  std::int64_t high_water_ = 0;  // take_allocated_high_water()
};

}  // namespace tp
