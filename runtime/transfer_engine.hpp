#pragma once
// Moves tensors between the device and the pinned host pool on two side
// streams: offload (device -> host) and prefetch (host -> device).
//
// Note [Offload ordering]
// An offload (1) records an event on the tensor's compute stream and makes
// the offload stream wait on it, so the copy reads the finished contents;
// (2) copies device -> host on the offload stream; (3) records the tensor's
// copy event there. The caching allocator reuses a freed block on its stream
// at once (Note [Stream-ordered reuse]), so the device storage may not simply
// be freed while the copy still reads it. It goes back in one of two ways,
// neither of which blocks the host:
//  - once the copy event has completed (try_complete_offload, from poll());
//  - at once, stream-ordered (release_offloading): the runtime declares the
//    offload stream a user of the block (caching_allocator::record_stream)
//    and frees it, so the allocator keeps it "pending free" until the copy
//    has completed, exactly as a block that PyTorch's record_stream named.
//    An allocation that needs it before then waits in the allocator's slow
//    path (Note [Reclaim] in caching_allocator.hpp), not in the runtime.
// In the second case the tensor is on_host while its copy may still run; it
// keeps the copy event until poll() sees it complete, and a prefetch first
// makes the prefetch stream wait on it (the host copy must be whole). A
// tensor needed while offloading is taken back at once: its device storage
// was never released; the host block is freed when the copy completes.
// Memory the allocator does not know (a binding's own) cannot be guarded
// that way: then the host waits for the copy (synchronize_event).
//
// Note [Prefetch ordering]
// A prefetch allocates new device storage through the binding (on the compute
// stream), makes the prefetch stream wait on an event recorded on the compute
// stream (the block may have been freed by earlier compute work that is still
// queued), copies host -> device and records the copy event. Making the
// tensor resident makes the compute stream wait on that event
// (stream_wait_event), never the host and never the whole device, whether or
// not the copy has arrived: a late prefetch delays the device only. The host
// block is freed when the event has completed. A prefetch nobody has used yet
// can be taken back (cancel_prefetch): its device storage goes back
// stream-ordered behind the copy, and the host copy stays valid.
//
// Note [Late copies]
// A tensor used before its prefetch has arrived costs the device, not the
// host: the compute stream waits on the copy's event and the host goes on
// queueing. The wait is still a stall a timeline must show, but its length
// is known only once the copy is done, and the device offers no clock for
// it. So finish_prefetch, told when the tensor was asked for, keeps that
// time with the copy's event (held until poll sees it complete, to free the
// host block), and the poll that finds it complete sends the stall, with
// the time from the request to that poll: an upper bound, as fine as the
// program's calls into the runtime. runtime_stats::stall_ns stays the
// host's time (recomputes).
//
// Note [Tensors used on several streams]
// A tensor is tracked on the stream current when it was first saved (its
// `stream`), and every other stream that saves or uses it is kept in
// `other_streams`: a forward region under torch.cuda.stream(side) produces
// tensors there, and the op that reads them next may run on another stream.
// What reads or frees the device storage behind the program's back is
// ordered after all of them: an offload's copy waits on an event of each
// (step (1) of Note [Offload ordering]); a release without a copy (a drop)
// makes the allocator keep the block until each has passed it
// (caching_allocator::record_stream, a no-op for the block's own stream),
// or, for memory the allocator does not know, the host waits for each. A
// restore makes the stream that asked for it, the tensor's stream and the
// other streams wait on the copy. Ordering every tensor on the one stream
// current when the budget began gives wrong gradients when a forward runs on
// a busy side stream (seen on a GPU: docs/decisions.md, "Tensors used on
// several streams").
//
// Waits for an event alone (stream_wait_event) capture the record current at
// call time, so the scratch event of step (1) is reused at once.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "allocator/pinned_host_pool.hpp"
#include "allocator/runtime_allocator.hpp"
#include "device/device.hpp"
#include "device/event_pool.hpp"
#include "runtime/copy_cost_model.hpp"
#include "runtime/copy_timer.hpp"
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
  std::uint64_t cancelled_prefetches = 0;  ///< prefetches taken back unused (cancel_prefetch)
  /// Device blocks the host had to wait for because the allocator could not
  /// guard them (memory it does not own): Note [Offload ordering].
  std::uint64_t host_waits = 0;
};

/// Thread-safety: none; the runtime calls it with its lock held.
/// Lifetime: device, allocator and pool must outlive it. The destructor waits for every
/// copy in flight, frees their host blocks, and destroys the streams it
/// created and its events.
class transfer_engine {
 public:
  /// Uses the given side streams, or creates them. copy_seed: what copies
  /// cost until they are timed (Note [Copy cost model]).
  transfer_engine(device& dev, runtime_allocator& alloc, pinned_host_pool& pool,
                  std::optional<stream_id> offload_stream = {},
                  std::optional<stream_id> prefetch_stream = {}, bandwidth_model copy_seed = {});
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
  /// Requires: t offloading. Releases the device storage now, stream-ordered
  /// behind the copy (Note [Offload ordering]); t is on_host, its copy
  /// possibly still running. Blocks the host only for memory the allocator
  /// does not own.
  void release_offloading(managed_tensor& t);
  /// Requires: t offloading. t is resident again at once (no round trip).
  void cancel_offload(managed_tensor& t);
  /// Requires: t resident. Releases its device storage with no copy (a drop),
  /// behind the work queued on every stream that used it (Note [Tensors used
  /// on several streams]). Blocks the host only for memory the allocator
  /// does not own and a tensor used on several streams.
  void release_dropped(managed_tensor& t);

  /// Requires: t on_host. Allocates through the binding (may re-enter the
  /// runtime's reclaim; may throw tp::out_of_memory, leaving t on_host) and
  /// starts Note [Prefetch ordering]; t becomes prefetching.
  void start_prefetch(managed_tensor& t);
  /// Requires: t prefetching. Whether the copy has completed.
  bool copy_done(managed_tensor& t);
  /// Requires: t prefetching. Makes `compute`, t's stream and its other
  /// streams wait on the copy's event, without blocking the host; t is
  /// resident. late_since_ns
  /// >= 0: the copy had not arrived when the tensor was asked for then, and
  /// poll() reports the stall once it has (Note [Late copies]).
  void finish_prefetch(managed_tensor& t, stream_id compute, std::int64_t late_since_ns = -1);
  /// Requires: t prefetching. Gives the new device storage back,
  /// stream-ordered behind the copy; t is on_host again (its host copy is
  /// still whole).
  void cancel_prefetch(managed_tensor& t);
  /// On_host tensors whose copy may still run (release_offloading,
  /// cancel_prefetch) keep its event; this gives it back once it completed.
  /// Returns whether t has no copy in flight now.
  bool settle(managed_tensor& t);

  /// Forgets t in any state. A copy that still reads or writes its device
  /// storage guards that storage in the allocator (the binding frees it
  /// later, stream-ordered); its host block is freed once no copy touches
  /// it. t's device storage stays as it is (released when on_host or
  /// dropped). Never blocks the host, except for memory the allocator does
  /// not own.
  void discard(managed_tensor& t) noexcept;

  /// Frees host blocks whose copies have completed, and teaches the copy
  /// cost model the timed copies that have (Note [Timing copies]).
  /// now_ns: the runtime's clock, for the stalls of late copies (Note [Late
  /// copies]).
  void poll(std::int64_t now_ns);
  /// Host blocks still waiting on a copy.
  std::size_t deferred_host_frees() const { return deferred_.size(); }
  /// The bytes more that offloads may take of the pinned host pool, where it
  /// refuses past its budget (fallback error); none where it does not.
  std::optional<std::size_t> host_room() const;

  /// Sends the transfer events of Note [Runtime events] to o (nullptr:
  /// none). Not owned.
  void set_observer(runtime_observer* o) { observer_ = o; }

  stream_id offload_stream() const { return offload_; }
  stream_id prefetch_stream() const { return prefetch_; }
  const transfer_stats& stats() const { return stats_; }
  /// What copies cost on this device, as measured so far (Note [Copy cost
  /// model]); updated by poll().
  const copy_cost_model& copy_costs() const { return costs_; }

 private:
  struct deferred_free {
    event_id event;
    void* host;
    // Note [Late copies]: a stall to report once `event` completes, when
    // late_since_ns >= 0 (its detail is filled in then).
    std::int64_t late_since_ns = -1;
    runtime_event stall{};
  };
  void defer_host_free(managed_tensor& t);
  // Frees t's device storage behind the work queued on `stream`.
  void release_behind(managed_tensor& t, stream_id stream);
  // Makes `waiter` wait for the work queued so far on every stream that used
  // t (Note [Tensors used on several streams]).
  void wait_for_users(managed_tensor& t, stream_id waiter);
  void notify(runtime_event_kind kind, const managed_tensor& t, stream_id stream, std::int64_t detail = 0) {
    if (observer_ != nullptr) emit(kind, t, stream, detail);
  }
  void emit(runtime_event_kind kind, const managed_tensor& t, stream_id stream, std::int64_t detail) noexcept;

  device& dev_;
  runtime_allocator& alloc_;
  pinned_host_pool& pool_;
  stream_id offload_;
  stream_id prefetch_;
  bool own_offload_;
  bool own_prefetch_;
  event_pool events_{dev_};
  copy_timer timer_{dev_};
  copy_cost_model costs_;
  std::vector<deferred_free> deferred_;
  transfer_stats stats_;
  runtime_observer* observer_ = nullptr;
};

}  // namespace tp
