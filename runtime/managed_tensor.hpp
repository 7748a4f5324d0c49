#pragma once
// What the runtime tracks about one tensor, and the interface through which it
// touches the tensor's device storage (storage_binding, implemented by the
// torch glue in hooks/ and by fakes in tests).
//
// Note [Tensor states]
//   resident    --offload-->  offloading  --copy event done, release_device-->  on_host
//   offloading  --needed again-->  resident   (the device copy was never released)
//   on_host     --prefetch-->  prefetching --compute stream waits on event-->  resident
//   prefetching --a reclaim takes it back (cancel_prefetch)-->  on_host
//   resident    --drop (release_device)-->  dropped  --recompute()-->  resident
// These edges, and no others (tensor_state_edges below): a tensor moves
// only through managed_tensor::move_to(), which ends the process on any
// other move, since the runtime's bookkeeping (candidates, copies in
// flight, device and host storage) would no longer describe the tensor.
// The runtime frees device memory only through storage_binding::release_device,
// and only when no copy still reads it (Note [Offload ordering] in
// transfer_engine.hpp). Host blocks are freed only once the copy that reads or
// writes them has completed.

#include <cstddef>
#include <cstdint>
#include <list>
#include <thread>
#include <vector>

#include "allocator/pinned_host_pool.hpp"
#include "device/device.hpp"

namespace tp {

/// Identifies a tracked tensor; never reused by one memory_runtime.
enum class tensor_id : std::uint64_t {};

inline std::uint64_t to_underlying(tensor_id id) { return static_cast<std::uint64_t>(id); }

/// See Note [Tensor states].
enum class tensor_state : unsigned char { resident, offloading, on_host, prefetching, dropped };

/// How a victim leaves the device: copied to host (swap) or discarded and
/// recomputed when next needed (drop).
enum class eviction_action : unsigned char { swap, drop };

const char* to_string(tensor_state s);
const char* to_string(eviction_action a);

/// One edge of Note [Tensor states].
struct tensor_state_edge {
  tensor_state from;
  tensor_state to;
};

/// Note [Tensor states]: every move a tensor may make.
inline constexpr tensor_state_edge tensor_state_edges[] = {
    {tensor_state::resident, tensor_state::offloading},    // offload
    {tensor_state::offloading, tensor_state::on_host},     // copy done, device storage released
    {tensor_state::offloading, tensor_state::resident},    // needed again: offload cancelled
    {tensor_state::on_host, tensor_state::prefetching},    // prefetch
    {tensor_state::prefetching, tensor_state::resident},   // compute waits on the copy
    {tensor_state::prefetching, tensor_state::on_host},    // prefetch cancelled by a reclaim
    {tensor_state::resident, tensor_state::dropped},       // drop
    {tensor_state::dropped, tensor_state::resident},       // recompute
};

/// Whether tensor_state_edges holds from -> to.
constexpr bool is_legal_transition(tensor_state from, tensor_state to) noexcept {
  for (const tensor_state_edge& e : tensor_state_edges) {
    if (e.from == from && e.to == to) return true;
  }
  return false;
}

/// The glue's side of one tracked tensor's storage.
///
/// Thread-safety: called by the runtime with its lock held, from the thread
/// that called into the runtime (the training thread, or the allocator's
/// reclaim path on that thread); recompute() alone is called without it
/// (Note [Recompute outside the lock] in runtime.hpp). allocate_device() and
/// recompute() may allocate through the caching allocator and so re-enter
/// the runtime's reclaim() on the same thread; see Note [Runtime locking].
/// Lifetime: must outlive its registration (memory_runtime::untrack).
class storage_binding {
 public:
  virtual ~storage_binding() = default;
  /// The device storage now, or nullptr while it is released.
  virtual void* device_ptr() const = 0;
  /// Drops the device storage (torch: drop the DataPtr so its deleter frees it
  /// through the caching allocator). Called only when no queued copy reads it.
  virtual void release_device() noexcept = 0;
  /// New device storage of `bytes` for a restore, allocated for `stream` (the
  /// tensor's: Note [Prefetch ordering] in transfer_engine.hpp); the runtime
  /// copies the contents in. May throw tp::out_of_memory.
  virtual void* allocate_device(std::size_t bytes, stream_id stream) = 0;
  /// Re-creates storage and contents of a dropped tensor on its stream (torch:
  /// rerun the module with the RNG state restored). The runtime does not
  /// allocate first: a rerun allocates its own outputs, and pre-allocating
  /// would hold the bytes twice. Afterwards device_ptr() must be non-null.
  /// May throw; the tensor then stays dropped.
  virtual void recompute() = 0;
  /// Whether release_device() would free the storage now: false while
  /// something outside the runtime still holds it (torch: another tensor
  /// shares the storage), so evicting would free nothing. Asked just before
  /// an eviction; a victim that says false stays resident for this reclaim.
  /// Cheap and noexcept.
  virtual bool can_release() const noexcept { return true; }
  /// Whether recompute() would rebuild the bytes the storage holds now:
  /// false once they were changed in place after the recompute was set up
  /// (a rerun rebuilds the values of one version only). Asked before a
  /// drop; a tensor that says false is swapped, or stays, instead. Cheap and
  /// noexcept.
  virtual bool can_recompute() const noexcept { return true; }
};

/// The runtime's record of one tensor. Guarded by the runtime's lock.
struct managed_tensor {
  tensor_id id{};
  storage_binding* binding = nullptr;  ///< never null
  std::size_t bytes = 0;
  stream_id stream = default_stream;   ///< the compute stream that uses it
  /// The other streams it was used on (Note [Tensors used on several
  /// streams] in transfer_engine.hpp); usually none.
  std::vector<stream_id> other_streams;
  std::int64_t last_access_ns = 0;
  /// When its last access asked for it: last_access_ns less the restore that
  /// access waited for (Note [DTR's staleness] in dtr_policy.hpp).
  std::int64_t last_request_ns = 0;
  std::uint64_t access_count = 0;
  std::int64_t recompute_cost_ns = 0;  ///< 0: not recomputable
  /// What its recompute holds at its peak, inputs included; 0: unknown
  /// (Note [A rerun's working set] in resident_floor.hpp).
  std::size_t rerun_bytes = 0;
  /// What its segment's forward held beyond its start when t was made, for a
  /// rerun that stops at t (same Note); `unknown_growth` outside a segment.
  std::size_t segment_growth = unknown_growth;
  static constexpr std::size_t unknown_growth = SIZE_MAX;
  bool evictable = true;
  /// Position in the step's track order, to match the recorded step
  /// (Note [Step matching] in access_recorder.hpp).
  std::size_t ordinal = 0;
  /// The step (access_recorder::steps_completed) that tracked it, or
  /// `unrecorded` (Note [Reruns are not recorded] in runtime.hpp).
  std::uint64_t step = 0;
  static constexpr std::uint64_t unrecorded = UINT64_MAX;

  // --- transfer bookkeeping (transfer_engine) --------------------------------
  host_block host{};         ///< valid in offloading, on_host, prefetching
  event_id copy_event{};     ///< the in-flight copy's event, when one exists
  bool has_copy_event = false;
  std::int64_t prefetch_done_ns = -1;  ///< when a proactive prefetch finished
  bool planned_away = false;  ///< swapped by a step plan, which also brings it back
  bool dropped_this_step = false;  ///< Note [Recompute limit] in recompute_limit.hpp
  std::int64_t committed_ns = 0;   ///< what its drop committed the step to (same Note)

  // --- candidate set bookkeeping (candidate_set) -----------------------------
  bool in_candidates = false;
  bool pinned = false;  ///< being restored: never a victim
  std::uint32_t pins = 0;  ///< memory_runtime::pin() calls not yet unpinned: never a victim
  /// The thread recomputing it, with the runtime's lock released (Note
  /// [Recompute outside the lock] in runtime.hpp); default: none.
  std::thread::id recomputing_on{};
  std::size_t candidate_index = 0;
  std::list<managed_tensor*>::iterator lru_pos{};

  bool recomputable() const { return recompute_cost_ns > 0; }

  /// Note [Tensor states]; a new tensor is resident.
  tensor_state state() const noexcept { return state_; }
  /// Moves the tensor along an edge of tensor_state_edges. Any other move is
  /// a bug in the runtime: it ends the process with a message naming the
  /// tensor and both states (tp::fail_fast).
  void move_to(tensor_state next) noexcept;

 private:
  tensor_state state_ = tensor_state::resident;
};

/// Sets managed_tensor::pinned for its lifetime: the tensor is being
/// restored (a prefetch or a recompute) and must not become a victim, on
/// every path out, an exception's included. Guarded by the runtime's lock.
class pinned_while {
 public:
  explicit pinned_while(managed_tensor& t) noexcept : t_(t) { t_.pinned = true; }
  ~pinned_while() { t_.pinned = false; }
  pinned_while(const pinned_while&) = delete;
  pinned_while& operator=(const pinned_while&) = delete;

 private:
  managed_tensor& t_;
};

}  // namespace tp
