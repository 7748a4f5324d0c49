#include "runtime/runtime.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/errors.hpp"
#include "core/format_bytes.hpp"

namespace tp {

memory_runtime::memory_runtime(device& dev, runtime_allocator& alloc, pinned_host_pool& host,
                               clock& clk, options opts)
    : dev_(dev),
      alloc_(alloc),
      clock_(clk),
      opts_(std::move(opts)),
      engine_(dev, alloc, host, opts_.offload_stream, opts_.prefetch_stream, opts_.bandwidth),
      recorder_(opts_.recorder),
      policy_(make_policy(opts_.policy, opts_.sample_size)),
      rng_(opts_.seed) {
  recorder_.begin_step(clock_.now_ns());
  (void)alloc_.take_allocated_high_water();  // Note [Resident floor]: this runtime's samples start now
  if (opts_.register_reclaimer) alloc_.set_reclaimer(this);
}

memory_runtime::~memory_runtime() {
  engine_.set_observer(nullptr);  // bindings may be gone: discard() must not report
  if (opts_.register_reclaimer) alloc_.set_reclaimer(nullptr);
  for (auto& [id, t] : tensors_) engine_.discard(*t);
}

managed_tensor& memory_runtime::find(tensor_id id) const {
  const auto it = tensors_.find(to_underlying(id));
  if (it == tensors_.end()) {
    throw invalid_argument(
        fmt::format("tensorpager: tensor id {} is not tracked by this runtime", to_underlying(id)));
  }
  return *it->second;
}

tensor_id memory_runtime::track(storage_binding& binding, std::size_t bytes, stream_id stream,
                                std::int64_t recompute_cost_ns, bool evictable,
                                const track_options& more) {
  if (binding.device_ptr() == nullptr || bytes == 0) {
    throw invalid_argument(fmt::format(
        "tensorpager: track(): a tensor needs device storage and bytes > 0 (got {} bytes at {})",
        bytes, binding.device_ptr()));
  }
  lock_type lock(mu_);
  const std::int64_t now = clock_.now_ns();
  auto t = std::make_unique<managed_tensor>();
  t->id = tensor_id{next_id_++};
  t->binding = &binding;
  t->bytes = bytes;
  t->stream = stream;
  t->last_access_ns = now;
  t->last_request_ns = now;
  t->recompute_cost_ns = recompute_cost_ns > 0 ? recompute_cost_ns : 0;
  t->evictable = evictable;
  // Note [Reruns are not recorded]
  const bool recorded = !rerunning_locked();
  t->step = recorded ? recorder_.steps_completed() : managed_tensor::unrecorded;
  if (recorded) {
    std::vector<std::size_t> parent_ordinals;
    for (tensor_id p : more.parents) {
      const auto it = tensors_.find(to_underlying(p));
      if (it != tensors_.end() && it->second->step == t->step) parent_ordinals.push_back(it->second->ordinal);
    }
    t->ordinal = recorder_.on_track(bytes, t->recompute_cost_ns, evictable, now, std::move(parent_ordinals));
  } else {
    t->ordinal = SIZE_MAX;
  }
  managed_tensor& ref = *t;
  tensors_.emplace(to_underlying(ref.id), std::move(t));
  if (recorded) by_ordinal_.push_back(ref.id);
  lineage_.add(ref.id, ref.recompute_cost_ns, more.parents, more.revive);
  make_candidate(ref);
  sample_floor_locked(ref, true);
  if (segment_open_) ref.segment_growth = bytes_above(segment_held_, segment_start_);
  poll_locked();
  if (recorded) after_event_locked(false);
  return ref.id;
}

void memory_runtime::make_candidate(managed_tensor& t) {
  if (t.evictable && !t.pinned && t.pins == 0 && t.state() == tensor_state::resident) candidates_.add(t);
}

namespace {
/// Removes t from an unordered list of tensors, if it is there.
void erase_unordered(std::vector<managed_tensor*>& list, const managed_tensor& t) {
  const auto it = std::find(list.begin(), list.end(), &t);
  if (it == list.end()) return;
  *it = list.back();
  list.pop_back();
}
}  // namespace

void memory_runtime::remove_settling(managed_tensor& t) { erase_unordered(settling_, t); }

void memory_runtime::remove_in_flight(managed_tensor& t) { erase_unordered(in_flight_, t); }

void memory_runtime::after_event_locked(bool is_access) {
  if (!is_access && !iteration_open_) {  // Note [A step is an iteration] in runtime_stats.hpp
    iteration_open_ = true;
    ++stats_.steps;
  }
  if (const step_plan* plan = active_plan_locked()) {
    carry_out_plan_locked(*plan);
    // What a reclaim swapped against the plan comes back the usual way.
    if (is_access) prefetch_ahead_locked();
  } else if (is_access) {
    prefetch_ahead_locked();
  } else {
    proactive_offload_locked();
  }
}

bool memory_runtime::offload(tensor_id id) {
  lock_type lock(mu_);
  managed_tensor& t = find(id);
  if (t.state() != tensor_state::resident || t.pinned || !t.binding->can_release()) return false;
  candidates_.remove(t);
  if (!engine_.start_offload(t)) {
    make_candidate(t);
    return false;
  }
  in_flight_.push_back(&t);
  return true;
}

void memory_runtime::set_recompute_cost(tensor_id id, std::int64_t recompute_cost_ns, std::size_t rerun_bytes,
                                        bool stops_at_it) {
  lock_type lock(mu_);
  managed_tensor& t = find(id);
  t.recompute_cost_ns = recompute_cost_ns > 0 ? recompute_cost_ns : 0;
  // Note [A rerun's working set]: the segment just measured made t.
  const bool known = stops_at_it && t.segment_growth != managed_tensor::unknown_growth;
  t.rerun_bytes = bytes_above(rerun_bytes, known ? bytes_above(segment_total_, t.segment_growth) : 0);
  lineage_.set_cost(id, t.recompute_cost_ns);
  if (t.step == recorder_.steps_completed()) recorder_.on_cost(t.ordinal, t.recompute_cost_ns);
}

void memory_runtime::untrack(tensor_id id) {
  lock_type lock(mu_);
  managed_tensor& t = find(id);
  candidates_.remove(t);
  remove_in_flight(t);
  remove_settling(t);
  engine_.discard(t);
  lineage_.untracked(id);
  const bool recorded = t.step == recorder_.steps_completed();
  if (recorded) recorder_.on_untrack(t.ordinal, clock_.now_ns());
  tensors_.erase(to_underlying(id));
  if (recorded) {
    if (const step_plan* plan = active_plan_locked()) carry_out_plan_locked(*plan);
  }
}

void memory_runtime::step() {
  lock_type lock(mu_);
  poll_locked();
  recompute_limit_.end_step(recorder_.step_time(clock_.now_ns()));  // Note [Recompute limit]
  for (auto& [id, t] : tensors_) t->dropped_this_step = false;
  recorder_.begin_step(clock_.now_ns());
  by_ordinal_.clear();
  iteration_open_ = false;
  floor_.end_step();
  // Note [Proactive offload under pressure]
  const std::uint64_t pressure = stats_.reclaims + stats_.proactive_offloads;
  proactive_armed_ = pressure != pressure_mark_;
  pressure_mark_ = pressure;
  // After k boundaries the recorder has begun k + 1 steps (one at construction): the ended one is k - 1.
  notify_locked(runtime_event_kind::step, nullptr, static_cast<std::int64_t>(recorder_.steps_completed()) - 2);
  lineage_.prune();
  plan_locked();
  plan_cursor_.reset();
  publish_summary_locked();
}

void memory_runtime::plan_locked() {
  const step_record* prev = recorder_.previous();
  if (prev == nullptr) return;
  planning_inputs in;
  in.budget_bytes = alloc_.budget();
  in.copies = engine_.copy_costs();
  // Note [Step plan]: the floor is what the device held besides resident
  // tracked tensors under pressure, the largest seen so far (a step the plan
  // kept from pressure records none); before any pressure, the peak reserved
  // beyond the tracked peak.
  floor_estimate_ = std::max(floor_estimate_, prev->pressure_floor_bytes);
  if (floor_estimate_ > 0) {
    in.unmanaged_bytes = floor_estimate_;
  } else {
    const auto reserved = static_cast<std::size_t>(alloc_.stats().reserved_bytes.all().peak);
    in.unmanaged_bytes = reserved > prev->peak_live_bytes ? reserved - prev->peak_live_bytes : 0;
  }
  // Planning is policy bookkeeping too (Note [Cheap victim choice]): wall time.
  const auto t0 = std::chrono::steady_clock::now();
  policy_->plan_step(*prev, in);
  const std::int64_t spent =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  stats_.policy_ns += spent;
  stats_.plan_ns += spent;
}

void memory_runtime::poll() {
  lock_type lock(mu_);
  poll_locked();
}

std::size_t memory_runtime::poll_locked() {
  std::size_t released = 0;
  const std::int64_t now = clock_.now_ns();
  for (std::size_t i = 0; i < in_flight_.size();) {
    managed_tensor& t = *in_flight_[i];
    if (t.state() == tensor_state::offloading && engine_.try_complete_offload(t)) {
      released += t.bytes;
      in_flight_[i] = in_flight_.back();
      in_flight_.pop_back();
      continue;
    }
    if (t.state() == tensor_state::prefetching && t.prefetch_done_ns < 0 && engine_.copy_done(t)) {
      t.prefetch_done_ns = now;
    }
    ++i;
  }
  for (std::size_t i = 0; i < settling_.size();) {
    if (engine_.settle(*settling_[i])) {
      settling_[i] = settling_.back();
      settling_.pop_back();
    } else {
      ++i;
    }
  }
  engine_.poll(now);
  return released;
}

tensor_state memory_runtime::state(tensor_id id) const {
  lock_type lock(mu_);
  return find(id).state();
}

policy_kind memory_runtime::policy() const {
  lock_type lock(mu_);
  return policy_->kind();
}

copy_cost_model memory_runtime::copy_costs() const {
  lock_type lock(mu_);
  return engine_.copy_costs();
}

void memory_runtime::set_policy(policy_kind kind) {
  lock_type lock(mu_);
  policy_ = make_policy(kind, opts_.sample_size);
  plan_locked();
  plan_cursor_.reset();
}

std::size_t memory_runtime::recorded_events() const {
  lock_type lock(mu_);
  return recorder_.position();
}

std::size_t memory_runtime::prefetch_distance() const {
  lock_type lock(mu_);
  return recorder_.prefetch_distance();
}

runtime_stats memory_runtime::stats() const {
  lock_type lock(mu_);
  return stats_locked();
}

runtime_stats memory_runtime::stats_locked() const {
  runtime_stats s = stats_;
  const transfer_stats& e = engine_.stats();
  s.offloaded_bytes = e.offloaded_bytes;
  s.prefetched_bytes = e.prefetched_bytes;
  s.offloads = e.offloads;
  s.prefetches = e.prefetches;
  s.cancelled_prefetches = e.cancelled_prefetches;
  s.tracked = tensors_.size();
  for (const auto& [id, t] : tensors_) {
    switch (t->state()) {
      case tensor_state::resident: s.resident_bytes += t->bytes; break;
      case tensor_state::offloading:
      case tensor_state::prefetching:
        s.resident_bytes += t->bytes;
        s.on_host_bytes += t->bytes;
        break;
      case tensor_state::on_host: s.on_host_bytes += t->bytes; break;
      case tensor_state::dropped: s.dropped_bytes += t->bytes; break;
    }
    if (t->in_candidates) (t->binding->can_release() ? s.evictable_bytes : s.held_bytes) += t->bytes;
  }
  s.prefetch_distance = recorder_.prefetch_distance();
  s.floor_bytes = floor_.peak();
  return s;
}

void memory_runtime::publish_summary_locked() {
  const runtime_stats s = stats_locked();
  summary_tracked_.store(s.tracked, std::memory_order_relaxed);
  summary_evictable_.store(s.evictable_bytes, std::memory_order_relaxed);
  summary_on_host_.store(s.on_host_bytes, std::memory_order_relaxed);
  summary_dropped_.store(s.dropped_bytes, std::memory_order_relaxed);
  summary_held_.store(s.held_bytes, std::memory_order_relaxed);
}

// Note [Why a reclaim fell short] in reclaim_account.hpp.
std::string memory_runtime::describe() const {
  const auto load = [](const std::atomic<std::size_t>& a) { return a.load(std::memory_order_relaxed); };
  const std::size_t tracked = load(summary_tracked_);
  if (tracked == 0) return {};
  std::string s = fmt::format("runtime: {} tensors tracked, evictable {}", tracked, format_bytes(load(summary_evictable_)));
  if (const std::size_t held = load(summary_held_); held > 0) {
    s += fmt::format(" (and {} the program still holds elsewhere)", format_bytes(held));
  }
  s += fmt::format(", offloaded {}, dropped {}", format_bytes(load(summary_on_host_)), format_bytes(load(summary_dropped_)));
  s += describe_shortfall(last_reclaim_.load());
  return s;
}

void memory_runtime::set_observer(runtime_observer* o) {
  lock_type lock(mu_);
  observer_ = o;
  engine_.set_observer(o);
}

void memory_runtime::notify_locked(runtime_event_kind kind, const managed_tensor* t, std::int64_t detail) {
  if (observer_ == nullptr) return;
  runtime_event e;
  e.kind = kind;
  e.detail = detail;
  if (t != nullptr) {
    e.tensor = t->id;
    e.address = reinterpret_cast<std::uintptr_t>(t->binding->device_ptr());
    e.stream = t->stream;
    if (kind != runtime_event_kind::stall) e.bytes = t->bytes;
  }
  observer_->on_event(e);
}

void memory_runtime::notice_once(bool& said, std::string_view what) {
  if (said) return;
  said = true;
  if (opts_.log) opts_.log(what);
}

}  // namespace tp
