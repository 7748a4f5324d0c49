#include "profiler/event.hpp"

#include <array>

namespace tp::profiler {
namespace {

constexpr std::array<std::string_view, event_kind_count> kind_names = {
    "alloc",          "free_requested", "free_completed", "segment_alloc",   "segment_free", "oom",
    "budget_change",  "reclaim",        "eviction",       "offload_begin",   "offload_end",  "prefetch_begin",
    "prefetch_end",   "recompute_begin", "recompute_end", "stall",           "step",         "tag",
    "segment_map",    "segment_unmap",   "device_sync",
};
static_assert(static_cast<std::size_t>(event_kind::device_sync) + 1 == event_kind_count);

constexpr std::array<std::string_view, category_count> category_names = {
    "unknown", "parameter", "activation", "gradient", "optimizer_state", "compressed",
};
static_assert(static_cast<std::size_t>(category::compressed) + 1 == category_count);

}  // namespace

std::string_view to_string(event_kind k) noexcept {
  const auto i = static_cast<std::size_t>(k);
  return i < kind_names.size() ? kind_names[i] : std::string_view("unknown");
}

std::string_view to_string(category c) noexcept {
  const auto i = static_cast<std::size_t>(c);
  return i < category_names.size() ? category_names[i] : category_names[0];
}

std::optional<event_kind> parse_event_kind(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kind_names.size(); ++i) {
    if (kind_names[i] == name) return static_cast<event_kind>(i);
  }
  return std::nullopt;
}

std::optional<category> parse_category(std::string_view name) noexcept {
  for (std::size_t i = 0; i < category_names.size(); ++i) {
    if (category_names[i] == name) return static_cast<category>(i);
  }
  return std::nullopt;
}

}  // namespace tp::profiler
