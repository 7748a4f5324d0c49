#pragma once
// The trace-driven simulator (DESIGN.md, "Profiler and simulator"): replays a
// sim::trace through tensorpager's own caching_allocator, pinned_host_pool and
// memory_runtime over a simulated_device on a manual clock, and reports what
// the step would cost under a budget and a policy.
//
// Note [Simulated time]
// Time is the manual clock's. An operator first has its outputs allocated
// and its inputs made resident (runtime.access: restores, recomputes), then
// the host waits for the compute stream (a prefetch the runtime made it wait
// on: the clock jumps to the copy's end), then the clock advances by the
// operator's recorded time. Offloads and prefetches run on the runtime's own
// streams of the simulated device, at bandwidth and latency, and overlap the
// compute. So a step's time is compute + recompute + stall exactly, where
// stall is every clock jump spent waiting for a copy (on demand, on a
// prefetch, or in reclaim for an offload to finish) and recompute is the
// recorded time of every replayed operator. An unconstrained replay moves
// nothing, so its time is the sum of the recorded times.
//
// Note [What the runtime tracks]
// Storages marked saved (saved for backward; every produced storage of a DTR
// log) are tracked once their operator has run: evictable, droppable when the
// simulator can replay their producer (Note [Recomputable storages] in
// simulator.cpp), else swap only. Other storages (pre-existing ones, and
// temporaries not saved) are allocated through the same allocator but not
// tracked, as the torch glue leaves them to PyTorch.
//
// Note [Repeated replay]
// The policies that learn the step (Capuchin, hybrid, prefetch ahead) plan
// from the previous step, so the trace is replayed `repeat` times (default
// 2) on one runtime and the last replay is measured; peaks cover every
// replay. Storages still live at the end of a replay (the step's outputs)
// are freed before the next, in id order.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "sim/trace.hpp"
#include "runtime/eviction_policy.hpp"

namespace tp::sim {

/// PCIe 5.0 x16 pinned copies: 64 GB/s per direction on the wire; about 50
/// GB/s measured for cudaMemcpyAsync of pinned buffers, with ~5 us per copy.
inline constexpr double pcie5_x16_bytes_per_s = 50e9;
inline constexpr std::int64_t pcie5_latency_ns = 5'000;

struct sim_options {
  std::optional<std::size_t> budget_bytes;  ///< none: unconstrained
  policy_kind policy = policy_kind::hybrid;
  double bandwidth_bytes_per_s = pcie5_x16_bytes_per_s;  ///< > 0
  std::int64_t latency_ns = pcie5_latency_ns;            ///< >= 0
  /// Multiplies every recorded time (e.g. CPU times to an estimated GPU's).
  double compute_scale = 1.0;
  std::size_t repeat = 2;  ///< Note [Repeated replay]; >= 1
  /// memory_runtime_options of the same names (the runtime's defaults).
  bool proactive_offload = true;
  bool prefetch_ahead = true;
  std::uint64_t seed = 0x7470'7061'6765'72ULL;
};

/// One run's figures (all simulated time on the manual clock, except
/// policy_wall_ns). A value.
struct sim_report {
  bool fits = true;
  std::string failure;  ///< why it did not fit (the out-of-memory message)
  std::optional<std::size_t> budget_bytes;
  policy_kind policy = policy_kind::hybrid;
  std::size_t peak_reserved = 0;   ///< reserved_bytes.all.peak, every replay
  std::size_t peak_allocated = 0;  ///< allocated_bytes.all.peak
  /// 1 - peak_allocated / peak_reserved: what the cache strands at its worst.
  double fragmentation = 0.0;
  std::int64_t step_ns = 0;       ///< the measured replay / steps in the trace
  std::int64_t compute_ns = 0;    ///< recorded op time (scaled) of the measured replay
  std::int64_t recompute_ns = 0;  ///< Note [Simulated time]
  std::int64_t stall_ns = 0;
  double slowdown = 1.0;  ///< step_ns / the unconstrained step_ns (set by compare())
  std::size_t offloaded_bytes = 0;   ///< measured replay
  std::size_t prefetched_bytes = 0;
  std::uint64_t evictions = 0;
  std::uint64_t drops = 0;
  std::uint64_t recomputes = 0;  ///< storages re-created (incl. chains)
  std::int64_t policy_wall_ns = 0;  ///< wall time in eviction_policy::choose, every replay
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
