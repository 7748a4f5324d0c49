#include "runtime/allocator_aware_eviction.hpp"

#include <random>

namespace tp {

std::optional<eviction_choice> allocator_aware_choice::choose(const policy_context& ctx, eviction_policy& policy) {
  std::optional<eviction_choice> pick = policy.choose(ctx);
  if (!pick) return pick;
  const std::optional<reclaim_request> req = alloc_.current_reclaim();
  if (!req) return pick;
  if (req->call != call_) {
    call_ = req->call;
    chosen_.clear();
  }
  const auto usable = [&](const managed_tensor& t) {
    return alloc_.usable_if_freed(t.binding->device_ptr(), chosen_, *req);
  };
  managed_tensor* best = pick->victim;
  std::size_t best_usable = usable(*best);
  if (best_usable < req->size) {
    const auto consider = [&](managed_tensor& t) {
      if (&t == pick->victim) return;
      const std::size_t u = usable(t);
      const bool older = best != pick->victim && t.last_access_ns < best->last_access_ns;
      if (u > best_usable || (u == best_usable && older)) {
        best = &t;
        best_usable = u;
      }
    };
    const candidate_set& c = ctx.candidates;
    if (c.size() <= sample_) {
      for (std::size_t i = 0; i < c.size(); ++i) consider(c.at(i));
    } else {
      std::uniform_int_distribution<std::size_t> any(0, c.size() - 1);
      for (std::size_t i = 0; i < sample_; ++i) consider(c.at(any(ctx.rng)));
    }
  }
  chosen_.push_back(best->binding->device_ptr());
  if (best == pick->victim) return pick;
  const bool drop = pick->action == eviction_action::drop && best->recomputable();
  return eviction_choice{best, drop ? eviction_action::drop : eviction_action::swap};
}

}  // namespace tp
