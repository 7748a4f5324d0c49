// memory_runtime: bringing a tensor back for its use (access, pin,
// ensure_resident), by copy or by recompute. Note [Runtime locking] applies
// throughout; a recompute runs without the lock (Note [Recompute outside the
// lock] in runtime.hpp).

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "core/errors.hpp"
#include "runtime/runtime.hpp"

namespace tp {

void memory_runtime::access(tensor_id id) {
  lock_type lock(mu_);
  managed_tensor& t = find(id);
  access_locked(t, t.stream, lock);
}

void memory_runtime::access(tensor_id id, stream_id on) {
  lock_type lock(mu_);
  access_locked(find(id), on, lock);
}

void memory_runtime::use_on(tensor_id id, stream_id on) {
  lock_type lock(mu_);
  note_stream(find(id), on);
}

void memory_runtime::note_stream(managed_tensor& t, stream_id on) {
  if (on == t.stream) return;
  if (std::find(t.other_streams.begin(), t.other_streams.end(), on) == t.other_streams.end()) {
    t.other_streams.push_back(on);
  }
}

void memory_runtime::access_locked(managed_tensor& t, stream_id on, lock_type& lock) {
  poll_locked();
  note_stream(t, on);  // before a restore: its copy makes every user stream wait
  const std::int64_t requested = clock_.now_ns();  // Note [DTR's staleness] in dtr_policy.hpp
  ensure_resident_locked(t, on, lock);
  t.last_request_ns = requested;
  t.last_access_ns = clock_.now_ns();
  ++t.access_count;
  candidates_.touch(t);
  sample_floor_locked(t, false);  // Note [Resident floor]
  if (rerunning_locked()) return;  // Note [Reruns are not recorded]
  if (t.step == recorder_.steps_completed()) recorder_.on_access(t.ordinal, t.last_access_ns);
  // What this event sets off (a planned eviction, when this step's events do
  // not line up with the plan's) must not take t: its caller is about to use
  // it and holds no reference to it yet.
  const bool candidate = t.in_candidates;
  if (candidate) candidates_.remove(t);
  after_event_locked(true);
  if (candidate) make_candidate(t);
}

bool memory_runtime::rerunning_locked() const {
  return std::find(rerunning_.begin(), rerunning_.end(), std::this_thread::get_id()) != rerunning_.end();
}

void memory_runtime::pin(tensor_id id) {
  lock_type lock(mu_);
  managed_tensor& t = find(id);
  access_locked(t, t.stream, lock);  // held once: Note [Recompute outside the lock]
  ++t.pins;
  candidates_.remove(t);
}

void memory_runtime::unpin(tensor_id id) {
  lock_type lock(mu_);
  managed_tensor& t = find(id);
  if (t.pins == 0) {
    throw invalid_argument(fmt::format("tensorpager: unpin() of tensor {}, which is not pinned", to_underlying(id)));
  }
  if (--t.pins == 0) make_candidate(t);
}

void memory_runtime::ensure_resident(tensor_id id, stream_id compute) {
  lock_type lock(mu_);
  managed_tensor& t = find(id);
  poll_locked();
  ensure_resident_locked(t, compute, lock);
}

void memory_runtime::ensure_resident_locked(managed_tensor& t, stream_id compute, lock_type& lock) {
  // Note [Recompute outside the lock]: another thread may be recomputing it.
  while (t.recomputing_on != std::thread::id{}) {
    if (t.recomputing_on == std::this_thread::get_id()) {
      throw error(fmt::format("tensorpager: recomputing tensor {} needs tensor {} itself (a rerun that reads "
                              "its own output)",
                              to_underlying(t.id), to_underlying(t.id)));
    }
    recomputed_.wait(lock);
  }
  const std::int64_t requested = clock_.now_ns();
  switch (t.state()) {
    case tensor_state::resident:
      return;
    case tensor_state::offloading:
      // The device storage was never released: keep it, drop the host copy.
      remove_in_flight(t);
      engine_.cancel_offload(t);
      ++stats_.cancelled_offloads;
      break;
    case tensor_state::on_host:
    case tensor_state::prefetching: {
      // Note [Prefetch ordering]: the compute stream waits for the copy; the
      // host never does. A copy not done when the host gets here is late
      // (the device may still be busy with earlier work and not wait at all):
      // prefetch further ahead next time.
      const pinned_while restoring(t);
      if (t.state() == tensor_state::on_host) {
        remove_settling(t);
        engine_.start_prefetch(t);  // may re-enter reclaim(); Note [Runtime locking]
        in_flight_.push_back(&t);
      } else if (engine_.copy_done(t)) {
        const std::int64_t done = t.prefetch_done_ns >= 0 ? t.prefetch_done_ns : requested;
        recorder_.on_prefetch_idle(requested - done);
      }
      const bool late = !engine_.copy_done(t);
      if (late) {
        ++stats_.stalls;
        ++stats_.late_copies;
        recorder_.on_stall();
      }
      remove_in_flight(t);
      t.planned_away = false;
      // Note [Late copies] in transfer_engine.hpp: a late copy's stall is
      // reported once it is seen done.
      engine_.finish_prefetch(t, compute, late ? requested : -1);
      t.prefetch_done_ns = -1;
      break;
    }
    case tensor_state::dropped: {
      recompute_unlocked(t, lock);
      // Note [Reruns run beside other threads]: the lock was released and
      // taken again; what follows reads the runtime as it is now.
      t.move_to(tensor_state::resident);
      lineage_.restored(t.id);
      ++stats_.recomputes;
      stats_.recomputed_bytes += t.bytes;
      ++stats_.stalls;
      stats_.stall_ns += clock_.now_ns() - requested;
      // Note [Recompute limit]: the time spent, for the committed cost.
      if (!rerunning_locked()) recompute_limit_.spend(clock_.now_ns() - requested);
      if (t.dropped_this_step) {
        recompute_limit_.settle(t.committed_ns);
        t.dropped_this_step = false;
      }
      notify_locked(runtime_event_kind::stall, &t, clock_.now_ns() - requested);
      break;
    }
  }
  t.planned_away = false;
  make_candidate(t);
}

void memory_runtime::recompute_unlocked(managed_tensor& t, lock_type& lock) {
  // Unpinned at return, with the lock held again on every path.
  const pinned_while recomputing(t);
  t.recomputing_on = std::this_thread::get_id();
  rerunning_.push_back(t.recomputing_on);  // Note [Reruns run beside other threads]
  notify_locked(runtime_event_kind::recompute_begin, &t, 0);
  const auto finish = [&](bool failed) {
    rerunning_.erase(std::find(rerunning_.begin(), rerunning_.end(), t.recomputing_on));
    t.recomputing_on = {};
    notify_locked(runtime_event_kind::recompute_end, &t, failed ? 1 : 0);  // every begin has its end
    recomputed_.notify_all();
  };
  lock.unlock();  // Note [Recompute outside the lock]
  try {
    t.binding->recompute();
  } catch (...) {
    lock.lock();
    finish(true);
    throw;
  }
  lock.lock();
  if (t.binding->device_ptr() == nullptr) {
    finish(true);
    throw error(fmt::format("tensorpager: recompute() of tensor {} left it without storage", to_underlying(t.id)));
  }
  finish(false);
}

}  // namespace tp
