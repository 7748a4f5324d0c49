#pragma once
// The trace-driven simulator (DESIGN.md, "Profiler and simulator"): replays a
// sim::trace through tensorpager's own caching_allocator, pinned_host_pool and
// memory_runtime over a simulated_device on a manual clock, and reports what
// the step would cost under a budget and a policy.
//
// Note [Simulated time]
// Host time and device time are apart. The manual clock is the host's: it
// issues an operator (restores, recomputes and allocations through the
// runtime, then the operator itself as work of its recorded time on the
// compute stream of the simulated device, simulated_device::enqueue_work),
// and moves on by the operator's time, as a host that issues the next
// operator when this one would have finished. The device runs the compute
// stream in order, each operator starting once the previous one has and
// once every copy the stream was made to wait on (a prefetch: the runtime's
// stream_wait_event) has arrived; offloads and prefetches run on the
// runtime's own streams at bandwidth and latency and overlap the compute. A
// copy that arrives late delays the device, not the host. A host wait
// (synchronize, synchronize_event: the clock jumps to the awaited finish)
// delays every operator issued after it, so it costs step time exactly when
// the device would not have waited. A step ends when its last operator has
// run on the device (the replay synchronizes the compute stream then), so a
// step's time is compute + recompute + stall exactly, where stall is the
// time the compute stream stood idle: waiting for a copy, or for a host that
// waited. An unconstrained replay moves nothing, so its time is the sum of
// the recorded times. host_wait_ns and host_syncs report the host's side.
//
// Note [What the runtime tracks]
// Storages marked saved (saved for backward; every produced storage of a DTR
// log) are tracked once their operator has run: evictable, droppable when the
// simulator can replay their producer (Note [Recomputable storages] in
// recompute_plan.hpp), else swap only, with the tracked inputs of their
// operator as their lineage (track_options::parents). Other storages
// (pre-existing ones, and temporaries not saved) are allocated through the
// same allocator but not tracked, as the torch glue leaves them to PyTorch,
// except while they are lent (sim_options::lend).
// An operator's tracked inputs are pinned while it runs (Note [Operator
// inputs are pinned] in simulator.cpp).
//
// Note [Repeated replay]
// The policies that learn the step (Capuchin, hybrid, prefetch ahead) plan
// from the previous step, so the trace is replayed `repeat` times (default
// 2) on one runtime and the last replay is measured; peaks cover every
// replay. Storages still live at the end of a replay (the step's outputs)
// are freed before the next, in id order.
//
// Note [The simulator's defaults]
// sim_options{} is the live runtime's default setup, read from where the
// runtime reads it, never restated: the allocator's settings (segments,
// max_split_size) and the policy from tp::config{} (what an empty
// PYTORCH_CUDA_ALLOC_CONF gives the adapters: expandable segments, Note
// [Expandable segments by default] in config/config.cpp), the runtime's
// switches from memory_runtime_options{}, and lending as tp.budget() lends
// (budget_lends_by_default in config/config.hpp; manage:activations lends
// nothing: --lend False). tests/sim/defaults_test.cpp fails if they drift.
// The comparisons with DTR's simulator, which has no allocator and lends
// nothing, are measured with --expandable-segments False --lend False;
// docs/simulator.md says which published figure was measured how. One
// difference is the glue's, not a setting: the simulator recomputes per
// operator (each dropped storage re-runs its producer, Note [Recomputable
// storages] in recompute_plan.hpp), the live runtime per module segment;
// docs/simulator.md, "Simulator and runtime", measures what that changes.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "config/config.hpp"
#include "sim/trace.hpp"
#include "runtime/eviction_policy.hpp"
#include "runtime/runtime.hpp"

namespace tp::sim {

/// PCIe 5.0 x16 pinned copies: 64 GB/s per direction on the wire; about 50
/// GB/s measured for cudaMemcpyAsync of pinned buffers, with ~5 us per copy.
inline constexpr double pcie5_x16_bytes_per_s = 50e9;
inline constexpr std::int64_t pcie5_latency_ns = 5'000;

// Every default below: Note [The simulator's defaults].
struct sim_options {
  std::optional<std::size_t> budget_bytes;  ///< none: unconstrained
  policy_kind policy = config{}.policy;
  double bandwidth_bytes_per_s = pcie5_x16_bytes_per_s;  ///< > 0
  std::int64_t latency_ns = pcie5_latency_ns;            ///< >= 0
  /// Multiplies every recorded time (e.g. CPU times to an estimated GPU's).
  double compute_scale = 1.0;
  std::size_t repeat = 2;  ///< Note [Repeated replay]; >= 1
  /// memory_runtime_options of the same names.
  bool proactive_offload = memory_runtime_options{}.proactive_offload;
  bool prefetch_ahead = memory_runtime_options{}.prefetch_ahead;
  std::size_t sample_size = memory_runtime_options{}.sample_size;  ///< k
  /// caching_allocator_options::max_split_size (PyTorch's max_split_size_mb).
  std::size_t max_split_size = config{}.max_split_size.value_or(SIZE_MAX);
  /// The allocator's segments: expandable, as the live default (plain for
  /// the comparisons with DTR's simulator, bench/results/sim_dtr.md, where
  /// recompute-only dtr thrashes on DTR's Transformer log at 0.2 on plain
  /// segments only: they strand blocks).
  bool expandable_segments = config{}.expandable_segments;
  /// Note [Lending in the simulator] (sim/lend_plan.hpp): on, as tp.budget()
  /// and manage:all lend; off as manage:activations.
  bool lend = budget_lends_by_default;
  /// 0: a dropped storage is re-created by replaying its operator (Note
  /// [Recomputable storages]); N: at the cost of the module segment's forward
  /// up to it, as the live runtime with segment_depth N (Note [Segment
  /// recompute in the simulator] in sim/segment_cost.hpp). A glue difference,
  /// not a default of the runtime's: DTR's logs carry no modules.
  std::size_t segment_depth = 0;
  std::uint64_t seed = memory_runtime_options{}.seed;
};

/// One run's figures (all simulated time on the manual clock, except
/// policy_wall_ns). A value.
struct sim_report {
  bool fits = true;
  std::string failure;  ///< why it did not fit (the out-of-memory message)
  std::optional<std::size_t> budget_bytes;
  policy_kind policy = default_policy;
  std::size_t peak_reserved = 0;   ///< reserved_bytes.all.peak, every replay
  std::size_t peak_allocated = 0;  ///< allocated_bytes.all.peak
  /// 1 - peak_allocated / peak_reserved: what the cache strands at its worst.
  double fragmentation = 0.0;
  std::int64_t step_ns = 0;       ///< the measured replay / steps in the trace
  std::int64_t compute_ns = 0;    ///< recorded op time (scaled) of the measured replay
  std::int64_t recompute_ns = 0;  ///< Note [Simulated time]
  std::int64_t stall_ns = 0;
  /// Host time spent blocked in the measured replay (Note [Simulated time]),
  /// and the host synchronisations it made (simulated_device::host_syncs).
  std::int64_t host_wait_ns = 0;
  std::uint64_t host_syncs = 0;
  double slowdown = 1.0;  ///< step_ns / the unconstrained step_ns (set by compare())
  std::size_t offloaded_bytes = 0;   ///< measured replay
  std::size_t prefetched_bytes = 0;
  std::uint64_t evictions = 0;
  std::uint64_t drops = 0;
  std::uint64_t recomputes = 0;  ///< storages re-created (incl. chains)
  std::int64_t policy_wall_ns = 0;  ///< wall time in eviction_policy::choose and plan_step, every replay
  std::int64_t plan_wall_ns = 0;    ///< of which plan_step
};

/// Replays t under o. Never throws for out of memory (the report says it did
/// not fit); throws tp::error for an impossible trace or options (naming
/// them). Thread-safety: independent calls may run concurrently (each builds
/// its own device, allocator and runtime). Deterministic except
/// policy_wall_ns.
sim_report simulate(const trace& t, const sim_options& o);

/// Sets r.slowdown against the unconstrained report.
void compare(sim_report& r, const sim_report& unconstrained);

}  // namespace tp::sim
