#include "runtime/dtr_policy.hpp"

#include <algorithm>

namespace tp {

double dtr_policy::score(const managed_tensor& t, const policy_context& ctx) {
  const double cost = static_cast<double>(
      t.recomputable() ? t.recompute_cost_ns : 2 * ctx.bandwidth.transfer_ns(t.bytes));
  const double staleness = static_cast<double>(std::max<std::int64_t>(ctx.now_ns - t.last_access_ns, 0) + 1);
  const double bytes = static_cast<double>(std::max<std::size_t>(t.bytes, 1));
  return cost / (bytes * staleness);
}

std::optional<eviction_choice> dtr_policy::choose(const policy_context& ctx) {
  managed_tensor* v = detail::sample_min(ctx, k_, [&](const managed_tensor& t) { return score(t, ctx); });
  if (v == nullptr) return std::nullopt;
  return eviction_choice{v, v->recomputable() ? eviction_action::drop : eviction_action::swap};
}

}  // namespace tp
