#pragma once
// The training trace's quality figures (fragmentation at the peak, peak
// reserved bytes) from an untimed replay, for tp_allocator_bench's tables.

#include <cstddef>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "bench/allocation_sources.hpp"
#include "bench/summary_table.hpp"
#include "bench/training_trace.hpp"

namespace tp::bench {

/// The caching allocator as a Source that reads stats() after every call,
/// to find the moment of peak allocated bytes. Far too slow to time.
struct peak_tracking_source {
  caching_allocator& alloc;
  trace_quality& q;
  void* allocate(std::size_t bytes) {
    void* p = alloc.allocate(bytes);
    observe();
    return p;
  }
  void deallocate(void* p, std::size_t /*bytes*/) {
    alloc.deallocate(p);
    observe();
  }
  void observe() {
    const allocator_stats s = alloc.stats();
    const auto allocated = static_cast<std::size_t>(s.allocated_bytes.all().current);
    if (allocated > q.peak_allocated) {
      q.peak_allocated = allocated;
      q.reserved_at_peak = static_cast<std::size_t>(s.reserved_bytes.all().current);
    }
    q.peak_reserved = static_cast<std::size_t>(s.reserved_bytes.all().peak);
  }
};

/// Replays `steps` steps of t on a fresh allocator (expandable or plain
/// segments), untimed. Not thread-safe.
inline trace_quality measure_trace_quality(const training_trace& t, int steps, bool expandable) {
  rig r(expandable);
  trace_quality q;
  peak_tracking_source src{r.cached, q};
  std::vector<void*> ptrs(t.slots);
  for (int step = 0; step < steps; ++step) replay_step(t, src, ptrs);
  return q;
}

}  // namespace tp::bench
