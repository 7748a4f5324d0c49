#pragma once
// tp::profiler::allocator_recorder: the allocator_log that keeps one
// caching allocator's records in an event log.

#include <atomic>
#include <cstdint>
#include <vector>

#include "allocator/allocator_log.hpp"
#include "profiler/event_log.hpp"

namespace tp::profiler {

/// Receives one allocator's records (caching_allocator::set_log; Note
/// [Allocator log]) in chunks the log hands out under its cap, stamped
/// with the counter's ticks (or the log's clock when that is not a
/// tsc_clock), and allocations with the log's context. snapshot() turns
/// them into events of `device`.
///
/// Thread-safety: the allocator writes with its lock held, which makes it
/// the one producer; size(), dropped() and the log's snapshot() may run
/// meanwhile from any thread. Lifetime: made and owned by the log
/// (event_log::open_allocator_recorder); detach it from its allocator
/// before the log is destroyed.
class allocator_recorder final : public allocator_log {
 public:
  std::int16_t device() const { return device_; }
  event_log& log() const { return log_; }

  /// Records published so far, and records dropped because the log was
  /// full. Require the log's mutex (event_log calls them).
  std::size_t size() const noexcept;
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

  /// Appends every published record to `out` as events, in order: ticks
  /// converted with `tsc` (when the records hold ticks), kinds mapped, a
  /// folded free expanded into free_requested + free_completed (Note
  /// [Folded frees]). Requires the log's mutex. Throws std::bad_alloc.
  void append_events(std::vector<event>& out, const tsc_clock* tsc) const;

 private:
  friend class event_log;
  /// clock: what stamps records, nullptr for the counter's ticks.
  allocator_recorder(event_log& log, std::int16_t device, const tp::clock* clock) noexcept;
  allocator_record* next_chunk() noexcept override;
  /// Calls f(first, count) for each run of published records. Requires the
  /// log's mutex.
  template <typename F>
  void for_each_published(F&& f) const;

  event_log& log_;
  const std::int16_t device_;
  const bool ticks_;                    // time holds counter ticks
  std::vector<event_log::chunk> chunks_;  // guarded by log_.mutex_
  bool full_ = false;                   // the log refused a chunk: drop from now on
  std::atomic<std::uint64_t> dropped_{0};
};

}  // namespace tp::profiler
