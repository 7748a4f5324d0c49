#include "runtime/dtr_policy.hpp"

#include <algorithm>
#include <limits>

namespace tp {

bool dtr_policy::droppable(const managed_tensor& t) {
  return t.recomputable() && t.binding != nullptr && t.binding->can_recompute();
}

double dtr_policy::score(const managed_tensor& t, const policy_context& ctx) {
  if (!droppable(t)) return std::numeric_limits<double>::infinity();
  std::int64_t cost = t.recompute_cost_ns;
  if (ctx.graph != nullptr) cost += ctx.graph->neighbourhood_cost(t.id);
  // Note [DTR's staleness] in dtr_policy.hpp: from the request, not the access.
  const double staleness = static_cast<double>(std::max<std::int64_t>(ctx.now_ns - t.last_request_ns, 0) + 1);
  const double bytes = static_cast<double>(std::max<std::size_t>(t.bytes, 1));
  return static_cast<double>(cost) / (bytes * staleness);
}

// Note [DTR is recompute only] in dtr_policy.hpp.
std::optional<eviction_choice> dtr_policy::choose(const policy_context& ctx) {
  managed_tensor* v =
      detail::sample_min(ctx, ctx.candidates.size(), [&](const managed_tensor& t) { return score(t, ctx); });
  if (v != nullptr && droppable(*v)) return eviction_choice{v, eviction_action::drop};
  // Nothing can be dropped: the stalest of what cannot be (what the program
  // lends, above all) is swapped.
  v = nullptr;
  for (std::size_t i = 0; i < ctx.candidates.size(); ++i) {
    managed_tensor& t = ctx.candidates.at(i);
    if (v == nullptr || t.last_access_ns < v->last_access_ns) v = &t;
  }
  if (v == nullptr) return std::nullopt;
  return eviction_choice{v, eviction_action::swap};
}

}  // namespace tp
