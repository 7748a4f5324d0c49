#include "runtime/capuchin_policy.hpp"

#include <limits>

namespace tp {

std::optional<std::int64_t> capuchin_policy::gap_ns(const managed_tensor& t,
                                                    const policy_context& ctx) {
  if (ctx.previous == nullptr || !ctx.previous->matches(t.ordinal, t.bytes)) return std::nullopt;
  const auto next = ctx.previous->next_use_after(t.ordinal, ctx.step_time_ns);
  if (!next) return std::numeric_limits<std::int64_t>::max();  // not used again this step
  return *next - ctx.step_time_ns;
}

eviction_action capuchin_policy::action_for(const managed_tensor& t, const policy_context& ctx) {
  const std::int64_t round_trip = ctx.copies.round_trip_ns(t.bytes);
  if (!t.recomputable()) return eviction_action::swap;
  if (const auto gap = gap_ns(t, ctx)) {
    return *gap >= round_trip ? eviction_action::swap : eviction_action::drop;
  }
  return round_trip <= t.recompute_cost_ns ? eviction_action::swap : eviction_action::drop;
}

double capuchin_policy::score(const managed_tensor& t, const policy_context& ctx) {
  if (const auto gap = gap_ns(t, ctx)) return -static_cast<double>(*gap);
  return -static_cast<double>(ctx.now_ns - t.last_access_ns);
}

std::optional<eviction_choice> capuchin_policy::choose(const policy_context& ctx) {
  managed_tensor* v = detail::sample_min(ctx, k_, [&](const managed_tensor& t) { return score(t, ctx); });
  if (v == nullptr) return std::nullopt;
  return eviction_choice{v, action_for(*v, ctx)};
}

}  // namespace tp
