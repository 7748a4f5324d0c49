#pragma once
// tp::memory_runtime: which tracked tensors are resident, swapped or dropped;
// the allocator's reclaimer (DESIGN.md, "Budget and reclaim").
//
// Note [Runtime locking]
// One std::recursive_mutex guards all runtime state. It is recursive because
// of one legitimate re-entry: restoring a tensor calls storage_binding::
// allocate_device(), which allocates through the caching allocator, which
// may call reclaim() on the same thread (with the allocator's lock released,
// as the reclaimer contract guarantees). Before any binding call the runtime
// leaves its state consistent and marks the tensor being restored `pinned`
// (not a candidate), so a nested reclaim never picks it and no iterator is
// held across the call. reclaim() itself never calls allocate_device() or
// recompute(): it only starts copies, waits for their events and calls
// release_device(), so the nesting is at most one level.
// Rules for the glue: never untrack() a tensor from inside its own binding
// callbacks; never call the runtime from the allocator's segment_listener or
// from an allocator_log's next_chunk() (both run under the allocator's lock).
// Waits (for an offload's event) happen with the runtime's lock held: other
// threads that touch the runtime wait too, which keeps the state simple; the
// copy itself needs no runtime call to finish.
//
// Note [Reruns are not recorded]
// A rerun is a segment's forward run again to recompute a dropped tensor
// ("replay" is the simulator's word, for running a recorded trace). A
// recompute reruns part of the step: it accesses (and, in the trace
// simulator, re-creates and tracks) tensors that the step itself accesses at
// other points. What a step does then depends on the evictions made in it,
// and the n-th event, or the n-th tensor tracked, would name different
// things from one step to the next (Note [Step matching]), so a plan made
// from one step would act on the wrong tensors in the next. Tracks and
// accesses made inside storage_binding::recompute() are therefore not
// recorded: the recorded step is the program's own sequence, the same in
// every step, whatever was evicted. A tensor tracked inside a rerun has no
// ordinal and is planned for by nobody; policies still evict it.
//
// Note [Reruns run beside other threads]
// Because a recompute runs without the runtime's lock (Note [Recompute
// outside the lock]), "inside a rerun" is a property of a thread, not of
// the runtime: while one thread reruns, another may track, access, untrack
// or end the step, and its events are the program's own and are recorded.
// So rerunning_ lists the threads with a recompute in progress (one entry
// per nested recompute) and rerunning_locked() asks about the calling
// thread only; a runtime-wide counter would drop the other threads' events
// from the recorded step and make the plans of the next step name the wrong
// tensors. The interplay with the rest of the eviction machinery:
//  - the tensor being recomputed is pinned (not a candidate): a plan carried
//    out by another thread's event finds it not resident and passes over it;
//    no reclaim, proactive offload or plan touches it until it is back;
//  - Note [Recompute limit] counts the host time of a thread's outermost
//    recompute only (nested ones are inside it); time another thread spends
//    meanwhile is not counted as recompute;
//  - lineage (lineage::restored) and the committed cost are updated after
//    the lock is taken again, so they see the tensor's state as it is then.
//
// Note [Recompute outside the lock]
// recompute() is the one binding call made without the runtime's lock: it
// runs the glue's rerun, which in torch is Python, and so takes Python's
// lock. Holding the runtime's lock there would deadlock two threads: one in
// a rerun waiting for Python's lock, the other holding Python's lock (freeing
// a graph, which untracks) waiting for the runtime's. So the tensor is
// pinned and marked recomputing_on this thread, the lock is released for
// the call, and taken again after it; a rerun that accesses other tensors
// takes it afresh. Another thread that needs the same tensor meanwhile
// waits (recomputed_) until the recompute has finished or failed. The lock
// is held once when a recompute starts (access(), pin() and
// ensure_resident() are its only callers, each through ensure_resident_locked
// with its own lock; reclaim() never recomputes), so releasing it once
// releases it.
//
// Note [Prefetch never evicts]
// Prefetching ahead is speculative: its allocation must not evict anything
// (it could evict the tensor needed next). While it allocates, reclaim()
// returns 0 at once, the allocation fails, and the prefetch is left to the
// access itself.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "allocator/pinned_host_pool.hpp"
#include "allocator/reclaimer.hpp"
#include "allocator/runtime_allocator.hpp"
#include "core/clock.hpp"
#include "runtime/access_recorder.hpp"
#include "runtime/candidate_set.hpp"
#include "runtime/eviction_policy.hpp"
#include "runtime/lineage.hpp"
#include "runtime/managed_tensor.hpp"
#include "runtime/plan_cursor.hpp"
#include "runtime/reclaim_account.hpp"
#include "runtime/recompute_limit.hpp"
#include "runtime/resident_floor.hpp"
#include "runtime/runtime_observer.hpp"
#include "runtime/runtime_stats.hpp"
#include "runtime/transfer_engine.hpp"

namespace tp {

struct memory_runtime_options {
  policy_kind policy = default_policy;
  std::size_t sample_size = 32;  ///< k of the sampling policies
  /// What a copy costs until copies are timed on the device (Note [Copy
  /// cost model]); planning only, the copies run as fast as they run.
  bandwidth_model bandwidth{};
  std::optional<stream_id> offload_stream;   ///< none: the runtime creates one
  std::optional<stream_id> prefetch_stream;  ///< none: the runtime creates one
  bool prefetch_ahead = true;      ///< follow the recorded step (Note [Prefetch distance])
  bool proactive_offload = true;   ///< offload ahead of a recorded peak
  std::size_t proactive_lookahead = 8;  ///< events of the recorded step looked ahead
  access_recorder::options recorder{};
  /// Register as the allocator's reclaimer for the runtime's lifetime.
  bool register_reclaimer = true;
  /// Receives one-time notices (host pool full, ...). None: they are dropped.
  std::function<void(std::string_view)> log;
  std::uint64_t seed = 0x7470'7061'6765'72ULL;  ///< sampling
};

/// What track() may learn about a tensor beyond its storage.
struct track_options {
  /// Tracked tensors it was computed from (Note [Evicted neighbourhood] in
  /// lineage.hpp): DTR prices a drop by the evicted tensors a rerun would
  /// also need. Empty: the tensor's own cost only.
  std::span<const tensor_id> parents{};
  /// An untracked tensor that this one re-creates: it takes over that
  /// tensor's place in the lineage (its parents and children).
  std::optional<tensor_id> revive{};
};

/// The runtime over one device.
///
/// Thread-safety: every member may be called from any thread; see
/// Note [Runtime locking]. Streams: a tensor is used on the stream given to
/// track(); restores make that stream (or the one given) wait on copy events
/// only. Lifetime: device, allocator, pool and clock outlive it; the
/// constructor registers it as the allocator's reclaimer (unless disabled) and
/// the destructor unregisters it, so build and destroy it while no allocation
/// is in flight. Destroying it waits for copies in flight; tensors still
/// tracked are forgotten (their bindings are not called).
class memory_runtime final : public reclaimer {
 public:
  using options = memory_runtime_options;

  memory_runtime(device& dev, runtime_allocator& alloc, pinned_host_pool& host, clock& clk,
                 options opts = {});
  ~memory_runtime() override;
  memory_runtime(const memory_runtime&) = delete;
  memory_runtime& operator=(const memory_runtime&) = delete;

  /// Starts tracking a resident tensor whose storage binding.device_ptr()
  /// holds `bytes` used on `stream`. recompute_cost_ns > 0 makes it droppable;
  /// evictable == false keeps it resident (parameters, tensors the user holds).
  tensor_id track(storage_binding& binding, std::size_t bytes, stream_id stream,
                  std::int64_t recompute_cost_ns, bool evictable = true,
                  const track_options& more = {});
  /// A use of the tensor on its stream: makes it resident (ensure_resident),
  /// records the access, prefetches ahead.
  void access(tensor_id id);
  /// access() by work on `on`, which waits for a restore's copy and joins
  /// the tensor's streams if it is another (Note [Tensors used on several
  /// streams] in transfer_engine.hpp).
  void access(tensor_id id, stream_id on);
  /// Notes that work on `on` uses the tensor too (saved again by an op on
  /// another stream), changing nothing else.
  void use_on(tensor_id id, stream_id on);
  /// access(), and keeps the tensor resident (no victim) until the matching
  /// unpin(): an operator's inputs while it runs, as DTR locks them. Pins
  /// nest. Throws as ensure_resident (then nothing is pinned).
  void pin(tensor_id id);
  /// Ends one pin(); the tensor is a candidate again when none is left.
  void unpin(tensor_id id);
  /// Makes the tensor usable on `compute`: resident nothing; offloading taken
  /// back without a round trip; on_host copied back now and `compute` waits on
  /// the copy's event (a stall); prefetching `compute` waits on the event;
  /// dropped recomputed. Throws tp::out_of_memory when no memory can be had
  /// (the tensor keeps its state; nothing is lost).
  void ensure_resident(tensor_id id, stream_id compute);
  /// Explicit offload (LibTorch API): starts copying to host. Returns false
  /// when the tensor is not resident, its storage is held elsewhere
  /// (storage_binding::can_release) or the host pool is full.
  bool offload(tensor_id id);
  /// Makes the tensor droppable (cost > 0) or not (0) from now on: the glue
  /// learns whether a tensor can be recomputed only after its producer has
  /// finished (a module that changed its inputs in place cannot be re-run).
  /// rerun_bytes: what the rerun holds at its peak, the inputs it brings
  /// back included, when it runs its segment's whole forward; stops_at_it: it
  /// stops once the forward has made t, so it holds what the forward held
  /// until then (Note [A rerun's working set] in resident_floor.hpp).
  void set_recompute_cost(tensor_id id, std::int64_t recompute_cost_ns, std::size_t rerun_bytes = 0,
                          bool stops_at_it = false);
  /// Note [A rerun's working set] in resident_floor.hpp: a segment's forward
  /// begins (segments do not nest). Returns what is held now (0 under a budget).
  std::size_t segment_started();
  /// It has ended: the most bytes held (allocated, less what eviction would
  /// free) since segment_started(), beyond what was held then.
  std::size_t segment_growth();
  /// The tensor tracked last is an input of the segment in progress, which
  /// segment_growth() leaves to the caller (Note [A saved operand is held
  /// while its operator runs] in resident_floor.hpp).
  void segment_input_saved();
  /// Stops tracking. Waits for a copy that still touches its storage; frees
  /// its host block. The device storage (if any) stays with the binding.
  void untrack(tensor_id id);
  /// Step boundary: the step just ended becomes the recorded one and the
  /// policy plans the next step from it.
  void step();
  /// Completes finished offloads, frees host blocks of finished copies.
  void poll();

  /// Note [Reclaim] in caching_allocator.hpp: evicts until `bytes` are freed.
  std::size_t reclaim(std::size_t bytes, stream_id stream) override;
  /// Takes no lock: the allocator calls it with its own lock held (inside
  /// throw_oom), and taking the runtime's lock there would invert the order
  /// runtime -> allocator. It reads a summary published by reclaim() and
  /// step(), so it is as fresh as the last reclaim, which precedes every OOM.
  std::string describe() const override;

  tensor_state state(tensor_id id) const;
  runtime_stats stats() const;
  policy_kind policy() const;
  /// What copies cost on this device as timed so far (Note [Copy cost
  /// model]): what the policy prices swaps with. Thread-safe.
  copy_cost_model copy_costs() const;
  /// Replaces the policy (it plans from the recorded step at once).
  void set_policy(policy_kind kind);
  const eviction_policy& policy_object() const { return *policy_; }
  std::size_t prefetch_distance() const;
  /// Events recorded so far in the step in progress: the program's tracks,
  /// accesses and untracks, from every thread, none made inside a rerun
  /// (Note [Reruns run beside other threads]). For tests and tools.
  /// Thread-safe.
  std::size_t recorded_events() const;
  /// Note [Resident floor]: the peak of bytes no eviction could give back,
  /// over the last completed step and the one in progress.
  std::size_t floor_bytes() const;
  /// resident_floor::lowest(): the smallest floor of the steps so far, in
  /// whole granules with expandable segments (Note [Resident floor]).
  std::size_t lowest_floor_bytes() const;
  /// resident_floor::stranded_at_start(): the stranded bytes lowest_floor_bytes() counts.
  std::size_t floor_stranded_bytes() const;
  /// Throws tp::error describing the first broken invariant. O(tracked).
  void check_invariants() const;

  /// Registers the observer of Note [Runtime events] (nullptr: none); the
  /// profiler's runtime_recorder puts the events into a timeline. Takes the
  /// runtime's lock, so once it returns no event is on its way to the
  /// previous observer. Thread-safe. Not owned: unregister it before
  /// destroying it; the runtime's destructor sends nothing.
  void set_observer(runtime_observer* o);

 private:
  using lock_type = std::unique_lock<std::recursive_mutex>;
  managed_tensor& find(tensor_id id) const;
  // All *_locked members require mu_ held.
  std::size_t poll_locked();
  // Requires: `lock` holds mu_ exactly once (Note [Recompute outside the lock]).
  void ensure_resident_locked(managed_tensor& t, stream_id compute, lock_type& lock);
  void recompute_unlocked(managed_tensor& t, lock_type& lock);
  // access() with mu_ held once by `lock` (pin() uses it too).
  void access_locked(managed_tensor& t, stream_id on, lock_type& lock);
  static void note_stream(managed_tensor& t, stream_id on);
  // Whether the calling thread is inside a recompute() (Note [Reruns run
  // beside other threads]).
  bool rerunning_locked() const;
  // Note [Resident floor]: the candidates' bytes that eviction would free,
  // and t's part of them (one look at the budget: it takes the allocator's lock).
  struct floor_spare {
    std::size_t all = 0;
    std::size_t of_t = 0;
  };
  floor_spare floor_spare_locked(const managed_tensor& t) const;
  std::size_t spare_bytes_locked() const;  // floor_spare::all
  // One sample of floor_ at an event on t: `tracked`, t is the output of the
  // operator that ran since the previous event; otherwise t is accessed now.
  void sample_floor_locked(const managed_tensor& t, bool tracked);
  bool floor_counts_rerun_locked(const managed_tensor& t) const;
  std::size_t operand_spare_locked() const;
  void hold_in_segment_locked(std::size_t high_water, std::size_t now, std::size_t spare_before,
                              std::size_t spare_after);
  void make_candidate(managed_tensor& t);
  void remove_in_flight(managed_tensor& t);
  void remove_settling(managed_tensor& t);
  // Moves an offloading tensor to on_host at once, stream-ordered
  // (Note [Offload ordering]); returns its bytes.
  std::size_t release_offloading_locked(managed_tensor& t);
  std::optional<eviction_choice> choose_locked(std::size_t bytes_needed, std::uintptr_t begin,
                                               std::uintptr_t end);
  // Evicts one victim; returns bytes released now (drops) via `freed`, or
  // adds a started offload to `started`. False when the victim stayed.
  bool evict_locked(const eviction_choice& c, std::size_t& freed,
                    std::vector<managed_tensor*>& started);
  void drop_locked(managed_tensor& t);
  void prefetch_ahead_locked();
  void proactive_offload_locked();
  // A speculative prefetch (Note [Prefetch never evicts]); false when it
  // found no memory.
  bool try_prefetch_locked(managed_tensor& t);
  // Note [Carrying out a plan] (runtime_plan.cpp).
  const step_plan* active_plan_locked() const;
  managed_tensor* planned_tensor_locked(std::size_t ordinal);
  void carry_out_plan_locked(const step_plan& plan);
  // Starts one due departure; true when it is to be tried after the next event.
  bool carry_out_leave_locked(const planned_eviction& pe);
  // After each recorded event: the plan, or prefetch ahead and proactive
  // offload when there is none.
  void after_event_locked(bool is_access);
  void plan_locked();
  void notice_once(bool& said, std::string_view what);
  runtime_stats stats_locked() const;
  void publish_summary_locked();
  void notify_locked(runtime_event_kind kind, const managed_tensor* t, std::int64_t detail);

  device& dev_;
  runtime_allocator& alloc_;
  clock& clock_;
  options opts_;
  mutable std::recursive_mutex mu_;
  std::condition_variable_any recomputed_;  // Note [Recompute outside the lock]
  transfer_engine engine_;
  access_recorder recorder_;
  std::unique_ptr<eviction_policy> policy_;
  candidate_set candidates_;
  lineage lineage_;
  resident_floor floor_;  // Note [Resident floor]
  // Note [A rerun's working set]: a high water taken by segment_started() or
  // segment_growth(), for the floor's next sample; the most held (allocated,
  // less what eviction would free) since the segment in progress began.
  std::size_t held_high_water_ = 0;
  std::size_t segment_held_ = 0;
  std::size_t segment_start_ = 0;   // segment_held_ when it began
  bool segment_open_ = false;       // between segment_started() and segment_growth()
  std::size_t segment_total_ = 0;   // what the last segment_growth() returned
  // Note [A saved operand is held while its operator runs]: the tensor
  // tracked at the last event, within a segment.
  std::optional<tensor_id> operand_;
  std::unordered_map<std::uint64_t, std::unique_ptr<managed_tensor>> tensors_;
  std::vector<tensor_id> by_ordinal_;        // this step's tensors, by ordinal
  std::vector<managed_tensor*> in_flight_;   // offloading or prefetching
  std::vector<managed_tensor*> settling_;    // on_host with a copy still running
  std::mt19937_64 rng_;
  std::uint64_t next_id_ = 1;
  bool speculative_ = false;  // Note [Prefetch never evicts]
  // Note [Reruns run beside other threads]: one entry per recompute() in
  // progress, naming its thread.
  std::vector<std::thread::id> rerunning_;
  // Note [Proactive offload under pressure]
  bool proactive_armed_ = false;
  // Note [A step is an iteration] (runtime_stats.hpp): whether the iteration since the last
  // boundary has tracked a tensor.
  bool iteration_open_ = false;
  std::uint64_t pressure_mark_ = 0;  // reclaims + proactive offloads when this step began
  bool said_host_full_ = false;
  recompute_limit recompute_limit_;  // Note [Recompute limit] in recompute_limit.hpp
  plan_cursor plan_cursor_;          // Note [Carrying out a plan] in runtime_plan.cpp
  std::size_t floor_estimate_ = 0;  // Note [Step plan]: the largest pressure floor seen
  reclaim_account reclaim_;  // Note [Reclaim rounds] in reclaim_account.hpp
  runtime_observer* observer_ = nullptr;
  runtime_stats stats_;
  // describe()'s lock-free summary.
  std::atomic<std::size_t> summary_tracked_{0};
  std::atomic<std::size_t> summary_evictable_{0};
  std::atomic<std::size_t> summary_on_host_{0};
  std::atomic<std::size_t> summary_dropped_{0};
  std::atomic<std::size_t> summary_held_{0};
  published_reclaim last_reclaim_;  // Note [Why a reclaim fell short]
};

}  // namespace tp
