#pragma once
// event_pool: device events kept for reuse. The caching allocator records an
// event for every block freed behind another stream (Note [Stream-ordered
// reuse] in allocator/caching_allocator.hpp), the transfer engine one for
// every copy (Note [Offload ordering] in runtime/transfer_engine.hpp).
// Creating one per use would cost a driver call each time on CUDA, so each
// owns a pool, takes events from it and gives them back once completed.

#include <cstddef>
#include <vector>

#include "device/device.hpp"

namespace tp {

/// Events of one device, created on demand and reused after give().
///
/// Thread-safety: none. The owner calls it under its own lock (the
/// allocator's mutex; the runtime's lock for the transfer engine).
/// Lifetime: dev must outlive the pool. An event stays valid from take()
/// until the pool is destroyed, given back or not, so an owner may wait on
/// one after releasing its lock. The destructor destroys every event take()
/// created, exactly once; the owner must not use them afterwards.
class event_pool {
 public:
  /// timing: its events come from create_timing_event (copy_timer's).
  explicit event_pool(device& dev, bool timing = false) : dev_(dev), timing_(timing) {}
  ~event_pool();
  event_pool(const event_pool&) = delete;
  event_pool& operator=(const event_pool&) = delete;

  /// The event given back most recently, or a new one when none is free.
  /// A reused event keeps its last record until the caller records it again.
  /// Throws what device::create_event (create_timing_event) throws.
  event_id take();
  /// Makes e, from this pool's take(), free for reuse. Requires: e is not
  /// free already (each take() is given back at most once).
  void give(event_id e) { free_.push_back(e); }

  /// Events created so far (each destroyed by the destructor).
  std::size_t created() const { return all_.size(); }
  /// Events given back and not taken again.
  std::size_t free_count() const { return free_.size(); }

 private:
  device& dev_;
  bool timing_;
  std::vector<event_id> free_;
  std::vector<event_id> all_;
};

}  // namespace tp
