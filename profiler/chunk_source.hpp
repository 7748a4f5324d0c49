#pragma once
// tp::profiler::chunk_source: memory for the event log's chunks, mapped and
// populated ahead of need on a background thread.
//
// Note [Chunk memory]
// Chunks are filled by a thread that is inside the allocator, so whatever
// fresh memory costs lands on allocations: in a VM a first-touch fault per
// 4 KiB page (zeroing, memory-cgroup charge) is about a microsecond, some
// 20 ns per 80-byte event. So chunks are mapped 2 MiB-aligned, marked for
// transparent huge pages and populated in one call: one fault per 2 MiB
// where the kernel grants huge pages, one system call otherwise. Even so,
// populating a chunk can take milliseconds in a VM (the host faulting in
// fresh memory), so a filler thread keeps `spares` chunks ready and the
// allocating thread only takes one, which keeps the recorded fast path's
// overhead steady (bench/profiler_bench.cpp, TP_BENCH_SPARE_CHUNKS;
// measured: docs/decisions.md, Note [Chunk memory]). The work is moved, not
// removed; with no idle core the filler competes with the program. When no spare is ready (a burst, or
// a forked child, which has no filler) take() maps and populates the chunk
// itself; it never waits.

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

#include "profiler/event.hpp"

namespace tp::profiler {

/// Thread-safety: take() may be called from any thread. Lifetime: chunks
/// from take() outlive the source; give each back with release().
class chunk_source {
 public:
  /// chunk_events: events per full chunk. limit: the most chunks take() will
  /// ever hand out (the filler stops preparing beyond it). spares: chunks to
  /// keep ready; 0 runs no thread. Throws std::system_error if the thread
  /// cannot start.
  chunk_source(std::size_t chunk_events, std::size_t limit, std::size_t spares);
  ~chunk_source();
  chunk_source(const chunk_source&) = delete;
  chunk_source& operator=(const chunk_source&) = delete;

  /// A populated chunk with room for `events` (<= chunk_events) events, or
  /// as many of a smaller record (an allocator_record), aligned for an
  /// event; nullptr when the host is out of memory. Never throws or waits
  /// for the filler.
  void* take(std::size_t events) noexcept;

  /// Returns a chunk of `events` events from take().
  static void release(void* chunk, std::size_t events) noexcept;

 private:
  void fill();

  const std::size_t chunk_events_;
  std::mutex mutex_;  // guards the members below
  std::condition_variable wake_;
  std::vector<void*> ready_;
  std::size_t promised_ = 0;  // chunks taken or ready, toward limit_
  const std::size_t limit_;
  const std::size_t spares_;
  bool stop_ = false;
  std::thread filler_;  // last: starts after the members it reads
};

}  // namespace tp::profiler
