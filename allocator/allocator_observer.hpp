#pragma once
// What the allocator tells an observer (the profiler's event log) as it works.
//
// Note [Allocator events]
// The kinds follow the actions of PyTorch's memory_viz device traces, so the
// profiler can export them unchanged: alloc; free_requested (deallocate was
// called); free_completed (the block became reusable: at once, or after the
// stream events of record_stream); segment_alloc / segment_free (memory from
// or back to the device); oom. budget_change and reclaim are tensorpager's.
// `free` is free_requested and free_completed folded into one event: sent
// when deallocate finds no stream uses pending, which is the common case, so
// the fast path (allocate + free) costs an observer two calls, not three.
// free_completed alone follows a free_requested only when the block waited
// for stream events; consumers that need memory_viz's two actions expand a
// `free` into both (profiler: Note [Folded frees] in profiler/event_log.hpp).
// Each event carries the allocator's totals after it, so a counter track needs
// no replay and matches stats() at the same point.

#include <cstddef>
#include <cstdint>

#include "allocator/size_policy.hpp"
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
};

const char* to_string(allocator_event_kind k);

struct allocator_event {
  allocator_event_kind kind = allocator_event_kind::alloc;
  pool_kind pool = pool_kind::small;
  stream_id stream{};
  std::uintptr_t address = 0;  // block or segment; 0 for oom, budget_change, reclaim
  /// alloc/free*: the block's size; segment_*: the segment's; oom: bytes
  /// requested; budget_change: the new budget (0: none); reclaim: bytes asked.
  std::size_t bytes = 0;
  /// alloc: bytes requested; reclaim: bytes the reclaimer freed.
  std::size_t detail = 0;
  std::int64_t allocated_bytes = 0;  // totals after the event
  std::int64_t reserved_bytes = 0;
  std::int64_t active_bytes = 0;
};

/// Receives the allocator's events. Called with the allocator's lock held, on
/// the thread that caused the event: it must be cheap, must not throw, and
/// must not call back into the allocator. Not owned by the allocator.
class allocator_observer {
 public:
  virtual ~allocator_observer() = default;
  virtual void on_event(const allocator_event& e) noexcept = 0;
};

}  // namespace tp
