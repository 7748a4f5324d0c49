// memory_runtime: eviction (reclaim, proactive offload), prefetch ahead, and
// the invariant check. Note [Runtime locking] applies throughout.

#include <chrono>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "core/format_bytes.hpp"
#include "runtime/runtime.hpp"

namespace tp {

std::optional<eviction_choice> memory_runtime::choose_locked(std::size_t bytes_needed,
                                                             std::uintptr_t begin,
                                                             std::uintptr_t end) {
  const policy_context ctx{candidates_,
                           clock_.now_ns(),
                           bytes_needed,
                           recorder_.previous(),
                           recorder_.step_time(clock_.now_ns()),
                           engine_.copy_costs(),
                           rng_,
                           begin,
                           end,
                           &lineage_};
  // Policy cost is CPU time, so it is read from the wall clock, not clock_.
  const auto t0 = std::chrono::steady_clock::now();
  auto choice = policy_->choose(ctx);
  if (choice && choice->action == eviction_action::drop && !policy_->recompute_only() && recompute_limit_.over()) {
    choice->action = eviction_action::swap;  // Note [Recompute limit]
    ++stats_.recompute_limited;
  }
  stats_.policy_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
  ++stats_.policy_calls;
  return choice;
}

void memory_runtime::drop_locked(managed_tensor& t) {
  candidates_.remove(t);
  notify_locked(runtime_event_kind::eviction, &t, 1);  // before release: the block's address
  engine_.release_dropped(t);
  t.move_to(tensor_state::dropped);
  // Note [Recompute limit]: the drop commits its recompute, and that of the
  // parents its rerun will need.
  t.committed_ns = t.recompute_cost_ns + lineage_.evicted_parents_cost(t.id);
  recompute_limit_.commit(t.committed_ns);
  t.dropped_this_step = true;
  lineage_.evicted(t.id);
  ++stats_.drops;
}

bool memory_runtime::evict_locked(const eviction_choice& c, std::size_t& freed,
                                  std::vector<managed_tensor*>& started) {
  managed_tensor& t = *c.victim;
  if (!t.binding->can_release()) {
    candidates_.remove(t);
    ++stats_.shared_skips;
    reclaim_.held_elsewhere(t.bytes);
    return false;  // held elsewhere: evicting frees nothing; the caller re-adds it
  }
  ++stats_.evictions;
  const bool droppable = t.recomputable() && t.binding->can_recompute();
  if (c.action == eviction_action::drop && droppable) {
    drop_locked(t);
    freed += t.bytes;
    return true;
  }
  candidates_.remove(t);
  if (engine_.start_offload(t)) {
    notify_locked(runtime_event_kind::eviction, &t, 0);
    in_flight_.push_back(&t);
    started.push_back(&t);
    return true;
  }
  ++stats_.host_fallbacks;
  if (droppable) {
    notice_once(said_host_full_,
                "tensorpager: the pinned host pool is full; evicting by recompute instead of "
                "swap, and keeping tensors that cannot be recomputed on the device");
    drop_locked(t);
    freed += t.bytes;
    return true;
  }
  notice_once(said_host_full_,
              "tensorpager: the pinned host pool is full; evicting by recompute instead of swap, "
              "and keeping tensors that cannot be recomputed on the device");
  reclaim_.kept(t.bytes);
  return false;  // stays resident; the caller re-adds it after this reclaim
}

// Note [Reclaim rounds] in reclaim_account.hpp.
std::size_t memory_runtime::reclaim(std::size_t bytes, stream_id /*stream*/) {
  lock_type lock(mu_);
  if (speculative_) return 0;  // Note [Prefetch never evicts]
  ++stats_.reclaims;
  proactive_armed_ = true;  // Note [Proactive offload under pressure]
  const allocator_stats astats = alloc_.stats();
  const std::int64_t retries = astats.num_alloc_retries;
  {
    // Note [Step plan]: what the device holds besides resident tracked tensors.
    std::size_t resident = 0;
    for (const auto& [id, t] : tensors_) {
      if (t->state() != tensor_state::on_host && t->state() != tensor_state::dropped) resident += t->bytes;
    }
    const auto held = static_cast<std::size_t>(astats.reserved_bytes.all().current);
    recorder_.on_pressure(held > resident ? held - resident : 0);
  }
  bytes = reclaim_.begin(bytes, retries);  // Note [Reclaim rounds]
  std::size_t freed = poll_locked();
  // Offloads already in flight free their storage soonest: released now,
  // stream-ordered behind their copies (Note [Offload ordering]).
  for (std::size_t i = 0; i < in_flight_.size() && freed < bytes;) {
    managed_tensor& t = *in_flight_[i];
    if (t.state() != tensor_state::offloading) {
      ++i;
      continue;
    }
    in_flight_[i] = in_flight_.back();
    in_flight_.pop_back();
    freed += release_offloading_locked(t);
  }
  std::vector<managed_tensor*> started;
  std::vector<managed_tensor*> kept;
  std::size_t pending = 0;
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  while (freed + pending < bytes) {
    const auto choice = choose_locked(bytes - freed - pending, begin, end);
    if (!choice) break;
    managed_tensor& t = *choice->victim;
    begin = reinterpret_cast<std::uintptr_t>(t.binding->device_ptr());
    end = begin + t.bytes;
    const std::size_t before = started.size();
    if (!evict_locked(*choice, freed, started)) {
      kept.push_back(&t);
      continue;
    }
    if (started.size() > before) pending += t.bytes;
  }
  // Every copy started, each device block goes back behind its own copy;
  // the allocator waits for them only if it needs them before they finish.
  for (managed_tensor* t : started) {
    if (t->state() != tensor_state::offloading) continue;
    remove_in_flight(*t);
    freed += release_offloading_locked(*t);
  }
  // Last, prefetches nobody has used yet: their host copies stay whole.
  for (std::size_t i = 0; i < in_flight_.size() && freed < bytes;) {
    managed_tensor& t = *in_flight_[i];
    if (t.state() != tensor_state::prefetching || t.pinned || t.pins != 0) {
      ++i;
      continue;
    }
    in_flight_[i] = in_flight_.back();
    in_flight_.pop_back();
    engine_.cancel_prefetch(t);
    t.prefetch_done_ns = -1;
    t.planned_away = false;  // its planned prefetch is spent: prefetch ahead brings it back
    if (t.has_copy_event) settling_.push_back(&t);
    freed += t.bytes;
  }
  for (managed_tensor* t : kept) make_candidate(*t);
  stats_.reclaimed_bytes += freed;
  last_reclaim_.store(reclaim_.outcome(freed));  // Note [Why a reclaim fell short]
  publish_summary_locked();
  return freed;
}

std::size_t memory_runtime::release_offloading_locked(managed_tensor& t) {
  engine_.release_offloading(t);
  if (t.has_copy_event) settling_.push_back(&t);
  return t.bytes;
}

void memory_runtime::prefetch_ahead_locked() {
  const step_record* prev = recorder_.previous();
  if (!opts_.prefetch_ahead || prev == nullptr) return;
  const std::size_t from = recorder_.position();
  const std::size_t to = std::min(prev->events.size(), from + recorder_.prefetch_distance());
  for (std::size_t i = from; i < to; ++i) {
    const step_event& e = prev->events[i];
    if (e.kind != step_event_kind::access || e.ordinal >= by_ordinal_.size()) continue;
    const auto it = tensors_.find(to_underlying(by_ordinal_[e.ordinal]));
    if (it == tensors_.end()) continue;
    managed_tensor& t = *it->second;
    if (t.state() != tensor_state::on_host || t.planned_away || !prev->matches(t.ordinal, t.bytes)) continue;
    try_prefetch_locked(t);
  }
}

bool memory_runtime::try_prefetch_locked(managed_tensor& t) {
  const pinned_while prefetching(t);
  speculative_ = true;  // Note [Prefetch never evicts]
  bool started = false;
  try {
    remove_settling(t);
    engine_.start_prefetch(t);
    in_flight_.push_back(&t);
    started = true;
  } catch (const out_of_memory&) {
    // No room without evicting: the access (or a later try) will restore it.
    if (t.has_copy_event) settling_.push_back(&t);
  } catch (...) {
    if (t.has_copy_event) settling_.push_back(&t);
    speculative_ = false;
    throw;
  }
  speculative_ = false;
  return started;
}

// Note [Proactive offload under pressure]
// Proactive offload predicts the next events' growth in tracked bytes from
// the previous step and starts copies when reserved + growth would pass the
// budget. That overestimates: growth is often served by cached free blocks
// inside what is already reserved, so with a budget the step fits in it
// moves memory that need not move; predicting from allocated bytes instead
// under-offloads at tighter budgets (measured: docs/decisions.md,
// "Proactive offload under pressure"). So the prediction stays, and it is
// armed only under pressure: from the first reclaim (the allocator asked the
// runtime for memory), and for every step that follows a step with a
// reclaim or a proactive offload. A step that needed neither disarms it. A
// budget the steps fit in thus costs nothing after the first step. A tight
// one pays blocking reclaims until its first reclaim of the first budgeted
// step, then behaves as before. Counting proactive offloads as pressure
// keeps it armed while it is what avoids the reclaims.
void memory_runtime::proactive_offload_locked() {
  const step_record* prev = recorder_.previous();
  const auto budget = alloc_.budget();
  if (!opts_.proactive_offload || !proactive_armed_ || prev == nullptr || !budget) return;
  const std::size_t pos = recorder_.position();  // events so far, this one included
  if (pos == 0 || pos > prev->live_bytes.size()) return;
  const std::size_t now_live = prev->live_bytes[pos - 1];
  std::size_t ahead = now_live;
  for (std::size_t i = pos; i < std::min(prev->live_bytes.size(), pos + opts_.proactive_lookahead); ++i) {
    ahead = std::max(ahead, prev->live_bytes[i]);
  }
  const auto reserved = static_cast<std::size_t>(alloc_.stats().reserved_bytes.all().current);
  const std::size_t growth = ahead - now_live;
  if (reserved + growth <= *budget) return;
  std::size_t in_flight_bytes = 0;
  for (const managed_tensor* t : in_flight_) {
    if (t->state() == tensor_state::offloading) in_flight_bytes += t->bytes;
  }
  std::size_t want = reserved + growth - *budget;
  want = want > in_flight_bytes ? want - in_flight_bytes : 0;
  std::size_t started_bytes = 0;
  std::vector<managed_tensor*> kept;
  while (started_bytes < want) {
    const auto choice = choose_locked(want - started_bytes, 0, 0);
    // Ahead of time only copies start; a drop waits for the reclaim that
    // needs it (a policy that would drop its best victim, as DTR always
    // does, starts no copy: copies started here would keep `dtr` from ever
    // recomputing under the runtime's defaults).
    if (!choice || choice->action != eviction_action::swap) break;
    managed_tensor& t = *choice->victim;
    candidates_.remove(t);
    if (!t.binding->can_release()) {
      ++stats_.shared_skips;
      kept.push_back(&t);
      continue;
    }
    if (!engine_.start_offload(t)) {
      kept.push_back(&t);
      break;
    }
    notify_locked(runtime_event_kind::eviction, &t, 0);
    in_flight_.push_back(&t);
    ++stats_.proactive_offloads;
    started_bytes += t.bytes;
  }
  for (managed_tensor* t : kept) make_candidate(*t);
}

void memory_runtime::check_invariants() const {
  lock_type lock(mu_);
  auto fail = [](const managed_tensor& t, const char* what) {
    throw error(fmt::format("tensorpager: runtime invariant broken for tensor {} ({}): {}",
                            to_underlying(t.id), to_string(t.state()), what));
  };
  std::size_t candidates = 0;
  for (const auto& [id, tp] : tensors_) {
    const managed_tensor& t = *tp;
    const bool has_device = t.binding->device_ptr() != nullptr;
    if (t.pinned) fail(t, "pinned outside a restore");
    switch (t.state()) {
      case tensor_state::resident:
        if (!has_device) fail(t, "resident without device storage");
        if (t.in_candidates != (t.evictable && t.pins == 0)) fail(t, "candidate flag disagrees with evictable");
        break;
      case tensor_state::offloading:
      case tensor_state::prefetching:
        if (!has_device || t.host.ptr == nullptr || !t.has_copy_event) fail(t, "copy state incomplete");
        if (t.in_candidates) fail(t, "in flight but a candidate");
        break;
      case tensor_state::on_host:
        if (has_device || t.host.ptr == nullptr) fail(t, "on host but storage disagrees");
        if (t.in_candidates) fail(t, "on host but a candidate");
        break;
      case tensor_state::dropped:
        if (has_device || t.host.ptr != nullptr) fail(t, "dropped but storage remains");
        if (t.in_candidates) fail(t, "dropped but a candidate");
        break;
    }
    if (t.in_candidates) ++candidates;
  }
  if (candidates != candidates_.size()) {
    throw error(fmt::format("tensorpager: candidate set holds {} tensors, {} are flagged",
                            candidates_.size(), candidates));
  }
  std::size_t flying = 0;
  for (const auto& [id, tp] : tensors_) {
    if (tp->state() == tensor_state::offloading || tp->state() == tensor_state::prefetching) ++flying;
  }
  if (flying != in_flight_.size()) {
    throw error(fmt::format("tensorpager: {} tensors in flight, {} listed", flying, in_flight_.size()));
  }
}

}  // namespace tp
