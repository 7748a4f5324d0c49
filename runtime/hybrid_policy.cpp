#include "runtime/hybrid_policy.hpp"

#include <algorithm>
#include <limits>

#include "runtime/capuchin_policy.hpp"

namespace tp {
namespace {

struct plan_input {
  std::size_t bytes = 0;
  bool evictable = false;
  bool recomputable = false;
  std::int64_t recompute_ns = 0;
  std::int64_t swap_penalty_ns = 0;  // round trip not hidden under the largest gap
};

// Planned peak for the actions (Note [Hybrid plan], step 2), and the start of
// the longest chain with its length.
struct peak_result {
  std::size_t peak = 0;
  std::size_t chain_begin = 0;
  std::size_t chain_end = 0;  // exclusive
};

peak_result planned_peak(const std::vector<plan_input>& in, const std::vector<eviction_action>& a,
                         std::size_t floor) {
  peak_result r;
  std::size_t working = 0;
  std::size_t chain = 0;
  std::size_t chain_start = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!in[i].evictable) {
      chain = 0;
      continue;
    }
    if (a[i] == eviction_action::drop) {
      if (chain == 0) chain_start = i;
      chain += in[i].bytes;
      if (chain > working) working = chain, r.chain_begin = chain_start, r.chain_end = i + 1;
    } else {
      chain = 0;
      if (in[i].bytes > working) working = in[i].bytes, r.chain_begin = r.chain_end = 0;
    }
  }
  r.peak = floor + working;
  return r;
}

}  // namespace

hybrid_plan hybrid_policy::make_plan(const step_record& recorded, const planning_inputs& pin) {
  std::vector<plan_input> in(recorded.tensors.size());
  std::size_t pinned_peak = 0;
  std::size_t pinned_live = 0;
  for (std::size_t i = 0; i < recorded.tensors.size(); ++i) {
    const step_tensor& t = recorded.tensors[i];
    std::int64_t gap = 0;
    for (std::size_t u = 1; u < t.uses_ns.size(); ++u) gap = std::max(gap, t.uses_ns[u] - t.uses_ns[u - 1]);
    const std::int64_t round_trip = 2 * pin.bandwidth.transfer_ns(t.bytes);
    in[i] = {t.bytes, t.evictable, t.recompute_cost_ns > 0, t.recompute_cost_ns,
             std::max<std::int64_t>(round_trip - gap, 0)};
  }
  // Non-evictable tracked bytes at their peak stay on the device whatever the plan.
  for (const step_event& e : recorded.events) {
    if (in[e.ordinal].evictable) continue;
    if (e.kind == step_event_kind::track) pinned_live += in[e.ordinal].bytes;
    if (e.kind == step_event_kind::untrack) pinned_live -= std::min(pinned_live, in[e.ordinal].bytes);
    pinned_peak = std::max(pinned_peak, pinned_live);
  }
  const std::size_t floor = pin.unmanaged_bytes + pinned_peak;
  const std::size_t budget = pin.budget_bytes.value_or(std::numeric_limits<std::size_t>::max());

  hybrid_plan plan;
  plan.actions.assign(in.size(), eviction_action::swap);
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i].evictable && in[i].recomputable &&
        in[i].recompute_ns <= 2 * pin.bandwidth.transfer_ns(in[i].bytes)) {
      plan.actions[i] = eviction_action::drop;
    }
  }
  // Step 3: break the longest chain until the peak fits.
  for (peak_result r = planned_peak(in, plan.actions, floor); r.peak > budget && r.chain_end > r.chain_begin;
       r = planned_peak(in, plan.actions, floor)) {
    std::size_t best = r.chain_begin;
    for (std::size_t i = r.chain_begin; i < r.chain_end; ++i) {
      if (in[i].swap_penalty_ns < in[best].swap_penalty_ns) best = i;
    }
    plan.actions[best] = eviction_action::swap;
  }
  // Step 4: take back drops that cost less than the swap penalty they replaced.
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!in[i].evictable || !in[i].recomputable || plan.actions[i] == eviction_action::drop) continue;
    if (in[i].recompute_ns >= in[i].swap_penalty_ns) continue;
    plan.actions[i] = eviction_action::drop;
    if (planned_peak(in, plan.actions, floor).peak > budget) plan.actions[i] = eviction_action::swap;
  }
  plan.planned_peak_bytes = planned_peak(in, plan.actions, floor).peak;
  plan.fits = plan.planned_peak_bytes <= budget;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (!in[i].evictable) continue;
    plan.added_time_ns +=
        plan.actions[i] == eviction_action::drop ? in[i].recompute_ns : in[i].swap_penalty_ns;
  }
  return plan;
}

void hybrid_policy::plan_step(const step_record& recorded, const planning_inputs& in) {
  plan_ = make_plan(recorded, in);
}

std::optional<eviction_choice> hybrid_policy::choose(const policy_context& ctx) {
  managed_tensor* v = detail::sample_min(ctx, k_, [&](const managed_tensor& t) {
    return capuchin_policy::score(t, ctx);
  });
  if (v == nullptr) return std::nullopt;
  const bool planned = ctx.previous != nullptr && ctx.previous->matches(v->ordinal, v->bytes) &&
                       v->ordinal < plan_.actions.size();
  eviction_action a = planned ? plan_.actions[v->ordinal] : capuchin_policy::action_for(*v, ctx);
  if (!v->recomputable()) a = eviction_action::swap;
  return eviction_choice{v, a};
}

}  // namespace tp
