#pragma once
// One entry of the profiler's event log: what happened, when, where, to how
// many bytes, and on whose behalf.
//
// Note [Event fields]
// Every event has the same fixed fields, so the log stores plain values and
// every exporter reads the same record. What a field means depends on kind:
//
//   kind               address        bytes              id         detail
//   alloc              block          block size         -          bytes requested
//   free_requested     block          block size         -          -
//   free_completed     block          block size         -          -
//   segment_alloc/free segment        segment size       -          -
//   segment_map/unmap  range          range size         1: large   the expandable segment's base
//                                                        pool, 0: small
//   device_sync        segment, if    bytes given back   -          1: the whole device waited for,
//                      one                                          0: the record's stream
//   oom                -              bytes requested    -          -
//   budget_change      -              new budget (0: none) -        -
//   reclaim            -              bytes asked for    -          bytes freed
//   eviction           device block   tensor bytes       tensor     1: dropped (recompute), 0: offloaded
//   offload_*          device block   tensor bytes       tensor     end: 1 taken back or untracked in flight
//   prefetch_*         device block   tensor bytes       tensor     end: 1 untracked in flight
//   recompute_*        block, if one  bytes recomputed   tensor/segment end: 1 recompute() threw
//   stall              -              -                  tensor     stall duration (ns)
//   step               -              -                  -          step index (from 0)
//   tag                block          -                  -          -  (re-labels a live block)
//
// allocated_bytes and reserved_bytes are the allocator's totals after the
// event on its device (Note [Allocator events]); host_bytes is the runtime's
// pinned-host total after an offload, prefetch or eviction. Each is -1 when
// the event's source does not know it, and exporters carry the last known
// value forward. category and label say on whose behalf memory was taken; see
// Note [Categories are inferred] in timeline_analysis.hpp. The runtime's
// events come from profiler::runtime_recorder (Note [Runtime events] in
// runtime/runtime_observer.hpp).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tp::profiler {

/// What an event records. The first eight and the last three are the
/// allocator's (Note [Allocator events]); the others are the runtime's, and
/// `tag`, which the hooks use to say what a live block holds once they know.
enum class event_kind : std::uint8_t {
  alloc,
  free_requested,
  free_completed,
  segment_alloc,
  segment_free,
  oom,
  budget_change,
  reclaim,
  eviction,
  offload_begin,
  offload_end,
  prefetch_begin,
  prefetch_end,
  recompute_begin,
  recompute_end,
  stall,
  step,
  tag,
  segment_map,
  segment_unmap,
  device_sync,
};
inline constexpr std::size_t event_kind_count = 21;

/// What a block of memory holds, as far as tensorpager can tell.
enum class category : std::uint8_t {
  unknown,
  parameter,
  activation,
  gradient,
  optimizer_state,
  compressed,  ///< a saved activation stored compressed for backward (tp.compress)
};
inline constexpr std::size_t category_count = 6;

/// An interned string (Note [Labels]): 0 is the empty label.
using label_id = std::uint32_t;

/// See Note [Event fields]. A plain value, 80 bytes.
struct event {
  std::int64_t t_ns = 0;
  std::uint64_t stream = 0;   ///< the stream handle (Note [Stream and event handles])
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t id = 0;
  std::int64_t detail = 0;
  std::int64_t allocated_bytes = -1;
  std::int64_t reserved_bytes = -1;
  std::int64_t host_bytes = -1;
  label_id label = 0;
  event_kind kind = event_kind::alloc;
  profiler::category category = category::unknown;
  std::int16_t device = 0;  ///< device index; the CPU adapter's simulated device is 0
};

/// "alloc", "offload_begin", ...: the names exporters write. Pure.
std::string_view to_string(event_kind k) noexcept;
/// "unknown", "parameter", "activation", "gradient", "optimizer_state",
/// "compressed". Pure.
std::string_view to_string(category c) noexcept;
/// The inverse of to_string; nullopt for an unknown name. Pure.
std::optional<event_kind> parse_event_kind(std::string_view name) noexcept;
std::optional<category> parse_category(std::string_view name) noexcept;

/// Whether the event comes from the runtime (eviction through step).
constexpr bool is_runtime_kind(event_kind k) noexcept {
  return k >= event_kind::eviction && k <= event_kind::step;
}

}  // namespace tp::profiler
