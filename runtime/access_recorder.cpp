#include "runtime/access_recorder.hpp"

#include <algorithm>
#include <utility>

namespace tp {

std::optional<std::int64_t> step_record::next_use_after(std::size_t ordinal,
                                                        std::int64_t t_ns) const {
  if (ordinal >= tensors.size()) return std::nullopt;
  const auto& uses = tensors[ordinal].uses_ns;  // sorted: appended in time order
  const auto it = std::upper_bound(uses.begin(), uses.end(), t_ns);
  if (it == uses.end()) return std::nullopt;
  return *it;
}

access_recorder::access_recorder(options opts)
    : opts_(opts), distance_(std::clamp<std::size_t>(opts.initial_distance, 1, opts.max_distance)) {}

void access_recorder::begin_step(std::int64_t now_ns) {
  if (steps_ > 0 || !current_.events.empty()) {
    current_.duration_ns = now_ns - step_start_ns_;
    previous_ = std::move(current_);
    has_previous_ = true;
  }
  current_ = step_record{};
  step_start_ns_ = now_ns;
  live_ = 0;
  ++steps_;
}

void access_recorder::push(step_event_kind kind, std::size_t ordinal, std::int64_t now_ns,
                           std::int64_t delta) {
  const std::int64_t t = now_ns - step_start_ns_;
  current_.events.push_back({kind, ordinal, t});
  if (delta >= 0) {
    live_ += static_cast<std::size_t>(delta);
  } else {
    live_ -= std::min(live_, static_cast<std::size_t>(-delta));
  }
  current_.live_bytes.push_back(live_);
  current_.peak_live_bytes = std::max(current_.peak_live_bytes, live_);
  if (kind != step_event_kind::untrack) {
    current_.tensors[ordinal].uses_ns.push_back(t);
    current_.tensors[ordinal].uses.push_back(current_.events.size() - 1);
  }
}

std::size_t access_recorder::on_track(std::size_t bytes, std::int64_t recompute_cost_ns,
                                      bool evictable, std::int64_t now_ns,
                                      std::vector<std::size_t> parents) {
  const std::size_t ordinal = current_.tensors.size();
  current_.tensors.push_back({bytes, recompute_cost_ns, evictable, {}, {}, std::move(parents)});
  push(step_event_kind::track, ordinal, now_ns, static_cast<std::int64_t>(bytes));
  return ordinal;
}

void access_recorder::on_access(std::size_t ordinal, std::int64_t now_ns) {
  if (ordinal < current_.tensors.size()) push(step_event_kind::access, ordinal, now_ns, 0);
}

void access_recorder::on_untrack(std::size_t ordinal, std::int64_t now_ns) {
  if (ordinal < current_.tensors.size()) {
    push(step_event_kind::untrack, ordinal, now_ns,
         -static_cast<std::int64_t>(current_.tensors[ordinal].bytes));
  }
}

void access_recorder::on_pressure(std::size_t floor_bytes) {
  current_.pressure_floor_bytes = std::max(current_.pressure_floor_bytes, floor_bytes);
}

void access_recorder::on_cost(std::size_t ordinal, std::int64_t recompute_cost_ns) {
  if (ordinal < current_.tensors.size()) current_.tensors[ordinal].recompute_cost_ns = recompute_cost_ns;
}

void access_recorder::on_stall() { distance_ = std::min(opts_.max_distance, distance_ * 2); }

void access_recorder::on_prefetch_idle(std::int64_t idle_ns) {
  if (idle_ns > opts_.idle_threshold_ns && distance_ > 1) --distance_;
}

}  // namespace tp
