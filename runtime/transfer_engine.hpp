#pragma once
// Moves tensors between the device and the pinned host pool on two side
// streams: offload (device -> host) and prefetch (host -> device).
//
// Note [Offload ordering]
// An offload (1) records an event on the tensor's compute stream and makes
// the offload stream wait on it, so the copy reads the finished contents;
// (2) copies device -> host on the offload stream; (3) records the tensor's
// copy event there. The device storage goes back (storage_binding::
// release_device) only once that event has completed: the caching allocator
// reuses a freed block on its stream at once (Note [Stream-ordered reuse]),
// so an earlier release would let new work overwrite bytes still being copied.
// A tensor needed while offloading is taken back at once: its device storage
// was never released; the host block is freed when the copy completes.
//
// Note [Prefetch ordering]
// A prefetch allocates new device storage through the binding (on the compute
// stream), makes the prefetch stream wait on an event recorded on the compute
// stream (the block may have been freed by earlier compute work that is still
// queued), copies host -> device and records the copy event. Making the
// tensor resident makes the compute stream wait on that event
// (stream_wait_event), never the whole device; the host block is freed when
// the event has completed.
//
// Waits for an event alone (stream_wait_event) capture the record current at
// call time, so the scratch event of step (1) is reused at once.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "allocator/pinned_host_pool.hpp"
#include "device/device.hpp"
#include "runtime/managed_tensor.hpp"
#include "runtime/runtime_observer.hpp"

namespace tp {

struct transfer_stats {
  std::size_t offloaded_bytes = 0;  ///< offloads completed (device storage released)
  std::size_t prefetched_bytes = 0;
  std::uint64_t offloads = 0;
  std::uint64_t prefetches = 0;
  std::uint64_t cancelled_offloads = 0;  ///< taken back while offloading
  std::uint64_t host_pool_refusals = 0;  ///< offloads refused for lack of host memory
};

/// Thread-safety: none; the runtime calls it with its lock held.
/// Lifetime: device and pool must outlive it. The destructor waits for every
/// copy in flight, frees their host blocks, and destroys the streams it
/// created and its events.
class transfer_engine {
 public:
  /// Uses the given side streams, or creates them.
  transfer_engine(device& dev, pinned_host_pool& pool, std::optional<stream_id> offload_stream = {},
                  std::optional<stream_id> prefetch_stream = {});
  ~transfer_engine();
  transfer_engine(const transfer_engine&) = delete;
  transfer_engine& operator=(const transfer_engine&) = delete;

  /// Requires: t resident with device storage. Starts Note [Offload ordering];
  /// t becomes offloading. Returns false, changing nothing, when the host pool
  /// cannot supply a block (tp::out_of_memory from the pool).
  bool start_offload(managed_tensor& t);
  /// Requires: t offloading. When the copy has completed, releases the device
  /// storage and makes t on_host; returns whether it did.
  bool try_complete_offload(managed_tensor& t);
  /// Requires: t offloading. Blocks the host until the copy completes, then
  /// completes it as try_complete_offload.
  void wait_offload(managed_tensor& t);
  /// Requires: t offloading. t is resident again at once (no round trip).
  void cancel_offload(managed_tensor& t);

  /// Requires: t on_host. Allocates through the binding (may re-enter the
  /// runtime's reclaim; may throw tp::out_of_memory, leaving t on_host) and
  /// starts Note [Prefetch ordering]; t becomes prefetching.
  void start_prefetch(managed_tensor& t);
  /// Requires: t prefetching. Whether the copy has completed.
  bool copy_done(managed_tensor& t);
  /// Requires: t prefetching. Blocks the host until the copy completes.
  void wait_copy(managed_tensor& t);
  /// Requires: t prefetching. Makes `compute` wait on the copy's event; t is
  /// resident.
  void finish_prefetch(managed_tensor& t, stream_id compute);

  /// Forgets t in any state: waits for a copy that still reads or writes its
  /// device storage, frees its host block. t's device storage stays as it is
  /// (released when on_host or dropped).
  void discard(managed_tensor& t) noexcept;

  /// Frees host blocks whose copies have completed.
  void poll();
  /// Host blocks still waiting on a copy.
  std::size_t deferred_host_frees() const { return deferred_.size(); }

  /// Sends the transfer events of Note [Runtime events] to o (nullptr:
  /// none). Not owned.
  void set_observer(runtime_observer* o) { observer_ = o; }

  stream_id offload_stream() const { return offload_; }
  stream_id prefetch_stream() const { return prefetch_; }
  const transfer_stats& stats() const { return stats_; }

 private:
  struct deferred_free {
    event_id event;
    void* host;
  };
  event_id take_event();
  void give_event(event_id e) { free_events_.push_back(e); }
  void defer_host_free(managed_tensor& t);
  void notify(runtime_event_kind kind, const managed_tensor& t, stream_id stream, std::int64_t detail = 0) {
    if (observer_ != nullptr) emit(kind, t, stream, detail);
  }
  void emit(runtime_event_kind kind, const managed_tensor& t, stream_id stream, std::int64_t detail) noexcept;

  device& dev_;
  pinned_host_pool& pool_;
  stream_id offload_;
  stream_id prefetch_;
  bool own_offload_;
  bool own_prefetch_;
  std::vector<event_id> free_events_;
  std::vector<event_id> all_events_;
  std::vector<deferred_free> deferred_;
  transfer_stats stats_;
  runtime_observer* observer_ = nullptr;
};

}  // namespace tp
