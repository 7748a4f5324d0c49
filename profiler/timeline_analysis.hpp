#pragma once
// tp::profiler::analyze: replays a timeline into what the exporters draw and
// print: memory by category over time, the peak and what was live at it, and
// the totals (bytes moved, recompute and stall time).
//
// Note [Categories are inferred]
// The allocator sees bytes, not tensors, so every category is an inference,
// and the page and the report say so. An allocation takes the category of
// the context (event_log::set_context) in force when it was made; the Python
// hooks (python/tensorpager/timeline.py) set it from the training phase:
// inside a module's forward "activation", in backward "gradient", in the
// optimizer's step "optimizer_state", otherwise "unknown". A temporary of the
// forward therefore counts as an activation, and a tensor made outside any
// phase (the input batch) as unknown. Tags (event_kind::tag) say what a block
// actually holds: the hooks tag the parameters and buffers of a model at its
// first forward, and after each optimizer step its parameters, their .grad
// and the optimizer's state; the activation codec tags each tensor it packs
// for backward "compressed" (hooks/compress, Note [Compressed in the
// timeline] in activation_codec.cpp). A tag is true of the block from its allocation
// to its free, so it re-labels the block's whole life, before the tag too.
// Bytes the replay cannot attribute (blocks allocated before recording
// began, and not tagged) are "unknown": by construction the categories of a
// sample add up to the allocator's own allocated total, so the plot's top
// edge is the allocated counter and its peak is the recorded peak.

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "profiler/block_notes.hpp"
#include "profiler/timeline.hpp"

namespace tp::profiler {

/// Memory on one device after one event.
struct memory_sample {
  std::int64_t t_ns = 0;
  /// Allocated bytes by category; they add up to `allocated`.
  std::array<std::int64_t, category_count> by_category{};
  std::int64_t allocated = 0;
  std::int64_t reserved = 0;  ///< reserved - allocated is cached-free
  std::int64_t host = 0;      ///< offloaded to pinned host memory
  std::int64_t budget = -1;   ///< -1: none
};

/// A block allocated and not yet freed.
struct live_block {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t requested = 0;
  std::uint64_t stream = 0;
  std::int64_t t_alloc_ns = 0;  ///< for a block live when recording began: the recording's start
  bool before_recording = false;  ///< live when recording began: its age is at least the recording's
  profiler::category category = category::unknown;
  label_id label = 0;
  block_origin origin = block_origin::allocated;
};

/// A budget in force over a stretch of a recording: [from_ns, to_ns].
struct budget_span {
  std::int64_t from_ns = 0;
  std::int64_t to_ns = 0;
  std::int64_t bytes = -1;  ///< -1: none
};

/// Figures over a whole recording of one device.
struct device_totals {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t peak_allocated = 0;
  std::int64_t peak_t_ns = 0;
  std::int64_t peak_reserved = 0;
  std::int64_t peak_host = 0;
  /// The budget over time, from the device's first event to its last: a new
  /// span at each change (a budget set, lifted or changed by a tp.budget
  /// block), in order. Never empty once the device has an event.
  std::vector<budget_span> budgets;
  std::int64_t budget_at_peak = -1;  ///< the budget in force at peak_t_ns; -1: none
  std::array<std::int64_t, category_count> at_peak{};  ///< by category at peak_t_ns
  std::int64_t cached_free_at_peak = 0;
  /// segment_allocs / segment_frees count segment_map / segment_unmap too.
  std::uint64_t allocs = 0, segment_allocs = 0, segment_frees = 0, ooms = 0, reclaims = 0;
  std::uint64_t reclaimed_bytes = 0;
  /// Host waits on the device to give memory back (Note [Giving memory back
  /// waits] in allocator/caching_allocator.hpp).
  std::uint64_t device_syncs = 0;
  std::uint64_t evictions = 0, dropped_evictions = 0;
  std::uint64_t offloads = 0, offloaded_bytes = 0;
  std::uint64_t prefetches = 0, prefetched_bytes = 0;
  std::uint64_t recomputes = 0, recomputed_bytes = 0;
  std::int64_t offload_ns = 0, prefetch_ns = 0, recompute_ns = 0;  ///< summed begin-to-end
  std::uint64_t stalls = 0;
  std::int64_t stall_ns = 0;
};

struct device_analysis {
  std::int16_t device = 0;
  /// One per allocator event, and per runtime event that changes host bytes.
  std::vector<memory_sample> samples;
  device_totals totals;
  /// The largest blocks live at the peak, largest first.
  std::vector<live_block> top_at_peak;
  /// Blocks live at the peak, and the bytes they hold.
  std::size_t live_at_peak = 0;
};

struct analysis_options {
  /// How many of the largest live blocks at the peak to keep.
  std::size_t top_n = 20;
};

struct timeline_analysis {
  /// Devices that have events, by index.
  std::vector<device_analysis> devices;
  /// Times of the step events, in order.
  std::vector<std::int64_t> steps_ns;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::size_t events = 0;
  std::uint64_t dropped = 0;
  std::uint64_t max_events = 0;
};

/// Replays t (Note [Categories are inferred]). Pure; O(events log blocks).
timeline_analysis analyze(const timeline& t, const analysis_options& opts = {});

/// The samples of d reduced to at most about max_points, keeping for each
/// slice of time its first, lowest and highest sample, so the peak and the
/// troughs survive. Pure.
std::vector<memory_sample> downsample(const std::vector<memory_sample>& samples, std::size_t max_points);

}  // namespace tp::profiler
