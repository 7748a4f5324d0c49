#pragma once
// What the allocator records as it works, and where it writes it: the
// profiler's timeline (profiler::allocator_recorder) or a test's buffer.
//
// Note [Allocator events]
// The kinds follow the actions of PyTorch's memory_viz device traces, so the
// profiler can export them unchanged: alloc; free_requested (deallocate was
// called); free_completed (the block became reusable: at once, or after the
// stream events of record_stream); segment_alloc / segment_free (memory from
// or back to the device); segment_map / segment_unmap (granules mapped into or
// unmapped from an expandable segment: address and bytes give the range);
// oom. budget_change and reclaim are tensorpager's.
// `free` is free_requested and free_completed folded into one record: written
// when deallocate finds no stream uses pending, which is the common case, so
// the fast path (allocate + free) costs two records, not three.
// free_completed alone follows a free_requested only when the block waited
// for stream events; consumers that need memory_viz's two actions expand a
// `free` into both (the profiler does, in event_log::snapshot()). Each record
// carries the allocator's totals after it, so a counter track needs no replay
// and matches stats() at the same point.
//
// Note [Allocator log]
// Recording sits on the allocator's fast path, so the allocator writes each
// record itself, in place, under its own lock: caching_allocator::notify()
// is inline, and an allocator_log hands out slots from a chunk of memory
// without a virtual call, a lock or an atomic read-modify-write. Only when a
// chunk is used up does it call next_chunk() (virtual, once per chunk),
// unlike the virtual observer it replaced, which built an event, called out,
// and had it copied again. Time is the log's stamp(): the CPU's cycle
// counter, converted to nanoseconds when the profiler reads the records, or
// a tp::clock the log names (tests run on a manual clock). Reading the counter is most of what recording
// still costs.
//
// Publication: slots are written by one thread at a time (the allocator's
// lock holder) and published by a release store of the next free slot;
// published_end() is the matching acquire load, so a reader on another
// thread (the profiler's snapshot) sees every record before it.
// Measured: docs/decisions.md, Note [Allocator log].

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "allocator/size_policy.hpp"
#include "core/clock.hpp"
#include "core/cycle_counter.hpp"
#include "device/device.hpp"

namespace tp {

enum class allocator_event_kind : unsigned char {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  oom,
  budget_change,
  reclaim,
  free,  ///< free_requested + free_completed at once; totals after both
  /// Granules mapped into / unmapped from an expandable segment (PyTorch's
  /// segment_map / segment_unmap); Note [Expandable segments].
  segment_map,
  segment_unmap,
  /// The host waited for the device before giving memory back (Note [Giving
  /// memory back waits]): bytes is what was given back, stream the stream
  /// waited for, detail 1 when the whole device was waited for.
  device_sync,
};

const char* to_string(allocator_event_kind k);

/// One allocator event as the allocator writes it (Note [Allocator events]).
struct allocator_record {
  /// allocator_log::stamp() when it happened: counter ticks or ns.
  std::uint64_t time = 0;
  std::uint64_t address = 0;  ///< block or segment; 0 for oom, budget_change, reclaim
  /// alloc/free*: the block's size; segment_*: the segment's; oom: bytes
  /// requested; budget_change: the new budget (0: none); reclaim: bytes asked.
  std::uint64_t bytes = 0;
  /// alloc: bytes requested; reclaim: bytes the reclaimer freed;
  /// segment_map/unmap: the base of the expandable segment; else 0.
  std::uint64_t detail = 0;
  std::int64_t allocated_bytes = 0;  ///< totals after the event
  std::int64_t reserved_bytes = 0;
  std::uint64_t stream = 0;   ///< the block's stream, or the request's (oom)
  std::uint64_t context = 0;  ///< alloc: the log's context() at the time; else 0
  allocator_event_kind kind = allocator_event_kind::alloc;
  pool_kind pool = pool_kind::small;
};

/// Where an allocator writes its records (Note [Allocator log]).
/// Thread-safety: claim(), publish() and stamp() are called by one thread at
/// a time (the allocator calls them under its lock); published_end() and
/// context() may be read from any thread. Lifetime: detach a log from its
/// allocator (set_log(nullptr)) before destroying it.
class allocator_log {
 public:
  virtual ~allocator_log() = default;
  allocator_log(const allocator_log&) = delete;
  allocator_log& operator=(const allocator_log&) = delete;

  /// The slot for the next record, to fill completely (it may hold an older
  /// record's bytes) and then publish(); nullptr when the log is full and
  /// the record is dropped.
  allocator_record* claim() noexcept {
    allocator_record* slot = next_.load(std::memory_order_relaxed);
    if (slot == end_) return next_chunk();
    // Own the cache line a few records ahead now, so a later unlock of the
    // allocator does not wait for it to arrive.
    __builtin_prefetch(slot + prefetch_distance, 1, 3);
    return slot;
  }
  /// Publishes the slot claim() returned, and every slot before it.
  void publish(allocator_record* slot) noexcept { next_.store(slot + 1, std::memory_order_release); }

  /// The time to put in allocator_record::time now.
  std::uint64_t stamp() const noexcept {
    return clock_ != nullptr ? static_cast<std::uint64_t>(clock_->now_ns()) : read_cycle_counter();
  }
  /// An opaque word stamped on each alloc record: what the owner says
  /// allocations are made for right now (the profiler's alloc_context).
  std::uint64_t context() const noexcept {
    return context_ != nullptr ? context_->load(std::memory_order_relaxed) : 0;
  }

 protected:
  /// clock: what stamp() reads; nullptr for the cycle counter. context: the
  /// word context() reads (nullptr: 0). Both must outlive the log.
  allocator_log(const tp::clock* clock, const std::atomic<std::uint64_t>* context) noexcept
      : clock_(clock), context_(context) {}

  /// Called by claim() when the current chunk is used up (and at the first
  /// record): makes a new chunk current with start_chunk() and returns its
  /// first slot, or returns nullptr (the record is dropped; the log counts
  /// it) and leaves the chunk as it is.
  virtual allocator_record* next_chunk() noexcept = 0;
  /// Makes [begin, end) the chunk claim() hands slots from. Called by
  /// next_chunk(); every record of the previous chunk is published.
  void start_chunk(allocator_record* begin, allocator_record* end) noexcept {
    end_ = end;
    next_.store(begin, std::memory_order_release);
  }
  /// One past the last published record of the current chunk (acquire).
  allocator_record* published_end() const noexcept { return next_.load(std::memory_order_acquire); }

 private:
  static constexpr std::size_t prefetch_distance = 8;  // records: 576 bytes

  std::atomic<allocator_record*> next_{nullptr};  // next free slot of the current chunk
  allocator_record* end_ = nullptr;               // end of the current chunk
  const tp::clock* const clock_;
  const std::atomic<std::uint64_t>* const context_;
};

}  // namespace tp
