// memory_runtime: carrying out a policy's step plan. Note [Runtime locking]
// applies throughout.
//
// Note [Carrying out a plan]
// With a policy that plans (hybrid, Note [Step plan] in step_planner.hpp),
// the runtime follows the plan instead of prefetching a fixed distance ahead
// and offloading on predicted growth. After each event of the step (track,
// access, untrack) it
//  - starts every planned departure that has come due (its leave_at has been
//    recorded): an offload for a swap, a drop for a drop, once the tensor is
//    resident and no operator pins it; one that is pinned is tried again
//    after the next event, until its next use has come;
//  - starts every planned prefetch that has come due, speculatively (Note
//    [Prefetch never evicts]); one that finds no memory, or whose offload
//    has not finished, is tried again after the next event, until its use.
// A current tensor stands for a planned ordinal only with the same size
// (Note [Step matching]). A swapped tensor's device block goes back when its
// copy completes (poll), or stream-ordered if a reclaim needs it first
// (Note [Offload ordering]), so carrying out a plan never blocks the host.
// A planned drop whose storage was changed in place since its rerun was
// set up (storage_binding::can_recompute) is swapped instead, as reclaim()
// does. What the plan did not foresee is left to reclaim() and the policy's
// choose(). The work per event is the due entries only: O(1) amortised.

#include "runtime/runtime.hpp"

namespace tp {

const step_plan* memory_runtime::active_plan_locked() const {
  const step_plan* p = policy_->plan();
  return p != nullptr && !p->empty() && recorder_.previous() != nullptr ? p : nullptr;
}

managed_tensor* memory_runtime::planned_tensor_locked(std::size_t ordinal) {
  const step_record* prev = recorder_.previous();
  if (prev == nullptr || ordinal >= by_ordinal_.size()) return nullptr;
  const auto it = tensors_.find(to_underlying(by_ordinal_[ordinal]));
  if (it == tensors_.end() || !prev->matches(ordinal, it->second->bytes)) return nullptr;
  return it->second.get();
}

void memory_runtime::carry_out_plan_locked(const step_plan& plan) {
  const std::size_t pos = recorder_.position();
  if (pos == 0) return;
  const std::size_t at = pos - 1;  // the event just recorded
  plan_cursor_.advance(plan, at);
  plan_cursor_.retain_leaves([&](std::size_t k) { return carry_out_leave_locked(plan.evictions[k]); });
  plan_cursor_.retain_prefetches([&](std::size_t k) {
    managed_tensor* t = planned_tensor_locked(plan.evictions[k].ordinal);
    if (t == nullptr) return false;
    return t->state() == tensor_state::offloading || (t->state() == tensor_state::on_host && !try_prefetch_locked(*t));
  });
}

bool memory_runtime::carry_out_leave_locked(const planned_eviction& pe) {
  managed_tensor* t = planned_tensor_locked(pe.ordinal);
  if (t == nullptr || t->state() != tensor_state::resident) return false;
  if (!t->in_candidates) return true;  // pinned by the operator running now: try again
  if (!t->binding->can_release()) return false;
  // A planned drop only of what a rerun rebuilds as it is now (Note
  // [Recompute reproduces one version] in hooks/budget/saved_storage.hpp);
  // else a swap.
  if (pe.action == eviction_action::drop && t->recomputable() && t->binding->can_recompute()) {
    ++stats_.evictions;
    ++stats_.planned_evictions;
    drop_locked(*t);
    return false;
  }
  candidates_.remove(*t);
  if (!engine_.start_offload(*t)) {
    make_candidate(*t);  // the host pool is full: a reclaim decides
    return false;
  }
  notify_locked(runtime_event_kind::eviction, t, 0);
  in_flight_.push_back(t);
  t->planned_away = true;
  ++stats_.proactive_offloads;
  ++stats_.planned_evictions;
  return false;
}

}  // namespace tp
