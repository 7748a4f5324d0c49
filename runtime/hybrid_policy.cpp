#include "runtime/hybrid_policy.hpp"

#include <algorithm>
#include <limits>

#include "runtime/capuchin_policy.hpp"

namespace tp {

std::pair<eviction_action, double> hybrid_policy::price(const managed_tensor& t, const policy_context& ctx) {
  const std::int64_t out = ctx.copies.transfer_ns(copy_direction::to_host, t.bytes);
  const std::int64_t back = ctx.copies.transfer_ns(copy_direction::to_device, t.bytes);
  const std::int64_t round_trip = out + back;
  std::int64_t exposed = round_trip;  // the next use unknown: all of it
  if (const auto gap = capuchin_policy::gap_ns(t, ctx)) {
    // The offload in full (the reclaim waits for it); of the prefetch, what
    // the gap after the offload does not hide.
    const std::int64_t hidden = std::clamp<std::int64_t>(*gap - out, 0, back);
    exposed = round_trip - hidden;
  }
  const double swap = static_cast<double>(exposed) + static_cast<double>(round_trip) / 16.0;
  if (!t.recomputable()) return {eviction_action::swap, swap};
  std::int64_t drop = t.recompute_cost_ns;
  if (ctx.graph != nullptr) drop += ctx.graph->neighbourhood_cost(t.id);
  const double d = static_cast<double>(drop);
  return d < swap ? std::pair{eviction_action::drop, d} : std::pair{eviction_action::swap, swap};
}

void hybrid_policy::plan_step(const step_record& recorded, const planning_inputs& in) {
  // Note [Replanning]: a step that ran under the plan without pressure, the
  // same shape and budget as the one planned from, keeps its plan.
  if (!plan_.empty() && recorded.pressure_floor_bytes == 0 && in.budget_bytes == planned_budget_ &&
      same_shape(recorded, planned_from_) && !in.copies.differs_from(planned_copies_, replan_ratio)) {
    return;
  }
  plan_ = make_step_plan(recorded, {in.budget_bytes, in.unmanaged_bytes, in.copies});
  planned_budget_ = in.budget_bytes;
  planned_copies_ = in.copies;
  planned_from_.clear();
  for (const step_tensor& t : recorded.tensors) planned_from_.push_back(t.bytes);
  planned_from_.push_back(recorded.events.size());
}

bool hybrid_policy::same_shape(const step_record& r, const std::vector<std::size_t>& shape) {
  if (shape.size() != r.tensors.size() + 1 || shape.back() != r.events.size()) return false;
  for (std::size_t i = 0; i < r.tensors.size(); ++i) {
    if (r.tensors[i].bytes != shape[i]) return false;
  }
  return true;
}

std::optional<eviction_choice> hybrid_policy::choose(const policy_context& ctx) {
  const auto score = [&](const managed_tensor& t) {
    const double staleness = static_cast<double>(std::max<std::int64_t>(ctx.now_ns - t.last_access_ns, 0) + 1);
    return price(t, ctx).second / (static_cast<double>(std::max<std::size_t>(t.bytes, 1)) * staleness);
  };
  managed_tensor* v = detail::sample_min(ctx, k_, score);
  if (v == nullptr) return std::nullopt;
  return eviction_choice{v, price(*v, ctx).first};
}

}  // namespace tp
