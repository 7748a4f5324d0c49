#pragma once
// Records one training step's access sequence to plan the next (Capuchin),
// and owns the adaptive prefetch distance.
//
// Note [Step matching]
// Tensor ids are new every step (the glue registers fresh activations), so a
// step is matched to the previous one by position: the n-th tensor tracked in
// this step is taken to be the n-th of the previous step when their sizes are
// equal. Training loops with static shapes repeat exactly; when shapes change
// the sizes disagree and the runtime plans nothing for that tensor (it falls
// back to its policy's step-free behaviour).
//
// Note [Prefetch distance]
// On each access the runtime prefetches the tensors the recorded step used in
// the next `distance` accesses. A stall (the compute stream had to wait for a
// copy) means the copy started too late: the distance doubles. A prefetched
// tensor that sat complete on the device for longer than idle_threshold_ns
// before its use held memory for nothing: the distance drops by one. It stays
// in [1, max_distance].

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace tp {

enum class step_event_kind : unsigned char { track, access, untrack };

struct step_event {
  step_event_kind kind = step_event_kind::track;
  std::size_t ordinal = 0;
  std::int64_t t_ns = 0;  ///< since the step began
};

struct step_tensor {
  std::size_t bytes = 0;
  std::int64_t recompute_cost_ns = 0;
  bool evictable = true;
  std::vector<std::int64_t> uses_ns;  ///< track and accesses, since step start
  std::vector<std::size_t> uses;      ///< the same, as event indices
  std::vector<std::size_t> parents;   ///< ordinals it was computed from (track_options)
};

/// One recorded step. A value; immutable once the step ended.
struct step_record {
  std::vector<step_event> events;
  std::vector<step_tensor> tensors;  ///< by ordinal
  std::vector<std::size_t> live_bytes;  ///< tracked bytes after each event
  std::size_t peak_live_bytes = 0;
  std::int64_t duration_ns = 0;
  /// The most the device held besides resident tracked tensors when the
  /// allocator asked for memory in this step (reserved - resident tracked
  /// bytes at each reclaim): weights, gradients, temporaries and the cache's
  /// fragments, as the planner must leave them room. 0: no reclaim.
  std::size_t pressure_floor_bytes = 0;

  /// The first use of ordinal strictly after t_ns, if the step had one.
  std::optional<std::int64_t> next_use_after(std::size_t ordinal, std::int64_t t_ns) const;
  /// True when ordinal exists in this record with exactly `bytes`.
  bool matches(std::size_t ordinal, std::size_t bytes) const {
    return ordinal < tensors.size() && tensors[ordinal].bytes == bytes;
  }
};

/// Thread-safety: none; guarded by the runtime's lock.
class access_recorder {
 public:
  struct options {
    std::size_t initial_distance = 2;
    std::size_t max_distance = 64;
    std::int64_t idle_threshold_ns = 5'000'000;
  };

  access_recorder() : access_recorder(options{}) {}
  explicit access_recorder(options opts);

  /// Starts a step at now_ns; the step in progress (if any) becomes previous().
  void begin_step(std::int64_t now_ns);
  /// Records a new tensor; returns its ordinal in this step.
  std::size_t on_track(std::size_t bytes, std::int64_t recompute_cost_ns, bool evictable,
                       std::int64_t now_ns, std::vector<std::size_t> parents = {});
  /// A reclaim saw `floor_bytes` held besides resident tracked tensors.
  void on_pressure(std::size_t floor_bytes);
  /// The tensor's recompute cost changed (an in-place write).
  void on_cost(std::size_t ordinal, std::int64_t recompute_cost_ns);
  void on_access(std::size_t ordinal, std::int64_t now_ns);
  void on_untrack(std::size_t ordinal, std::int64_t now_ns);

  /// The last complete step, or nullptr before the first step boundary.
  const step_record* previous() const { return has_previous_ ? &previous_ : nullptr; }
  const step_record& current() const { return current_; }
  /// Events so far in the current step (the position of the next one).
  std::size_t position() const { return current_.events.size(); }
  /// now_ns relative to the current step's start.
  std::int64_t step_time(std::int64_t now_ns) const { return now_ns - step_start_ns_; }
  std::uint64_t steps_completed() const { return steps_; }

  /// Note [Prefetch distance].
  std::size_t prefetch_distance() const { return distance_; }
  void on_stall();
  void on_prefetch_idle(std::int64_t idle_ns);

 private:
  void push(step_event_kind kind, std::size_t ordinal, std::int64_t now_ns, std::int64_t delta);

  options opts_;
  step_record current_;
  step_record previous_;
  bool has_previous_ = false;
  std::int64_t step_start_ns_ = 0;
  std::size_t live_ = 0;
  std::uint64_t steps_ = 0;
  std::size_t distance_;
};

}  // namespace tp
