// The process's budget session and the C++ API of tensorpager.hpp that uses
// it (budget_scope, step, runtime_stats).

#include "hooks/budget/budget_api.hpp"

#include <cmath>
#include <cstdio>
#include <exception>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>

#include "core/errors.hpp"
#include "hooks/installed_adapter.hpp"
#include "hooks/process_state.hpp"
#include "hooks/budget/budget_floor.hpp"
#include "hooks/tensorpager.hpp"

namespace tp::hooks {
namespace {

using session_registry = session_state;

/// The active session and what it needs at its first step (Note [Process state]).
session_registry& sessions() { return process().sessions; }

std::int64_t as_int(std::uint64_t v) { return static_cast<std::int64_t>(v); }

}  // namespace

std::optional<std::size_t> begin_session(const session_request& req) {
  if (req.ratio && !(*req.ratio > 0.0 && *req.ratio <= 1.0)) {
    throw invalid_argument("tensorpager: a budget ratio must be in (0, 1] (a share of the first step's peak); got " +
                           std::to_string(*req.ratio));
  }
  if (req.bytes && *req.bytes == 0) {
    throw invalid_argument("tensorpager: a budget of 0 bytes cannot be met; give a size > 0 or a ratio in (0, 1]");
  }
  installed_adapter a = installed_adapter_now();
  session_registry& r = sessions();
  std::lock_guard lock(r.mutex);
  if (r.active) {
    throw error("tensorpager: a budget is already active; budgets do not nest (end the outer one first, or change "
                "its size with set_budget())");
  }
  // Note [A session opens its device at the first tensor]: a session that
  // changes no budget asks for none that would open the device.
  const bool changes = req.bytes || req.ratio;
  const std::optional<std::optional<std::size_t>> known = a.control.budget_if_known();
  const std::optional<std::size_t> previous = known ? *known : changes ? a.control.budget_bytes() : std::nullopt;
  if (req.bytes) a.control.change_budget(*req.bytes);  // throws invalid_argument; nothing changed yet
  budget_session::options o;
  o.policy = req.policy.value_or(a.cfg.policy);
  o.prefetch_ahead = req.prefetch_ahead;
  try {
    // Note [A session opens its device at the first tensor] in budget_session.hpp.
    runtime_host* host = &a.host;  // adapters live forever
    r.active = budget_session::create([host] { return host->runtime_resources_now(); }, a.allocator, o);
  } catch (...) {
    if (req.bytes) a.control.change_budget(previous);
    throw;
  }
  r.last = r.active;
  r.pending_ratio = req.ratio;
  r.ratio = req.ratio;
  r.configured_budget_unknown = !known && !changes;
  if (req.ratio) {
    // Note [A ratio measures its first step] in budget_api.hpp.
    a.control.release_cache();
    a.control.reset_peaks();
  }
  return previous;
}

std::string end_session(std::optional<std::size_t> previous) {
  session_registry& r = sessions();
  std::shared_ptr<budget_session> s;
  bool configured = false;
  {
    std::lock_guard lock(r.mutex);
    s = std::exchange(r.active, nullptr);
    r.pending_ratio.reset();
    configured = std::exchange(r.configured_budget_unknown, false);
  }
  if (!s) return {};
  // Lift the budget first: making every managed storage resident again must
  // not fail for want of room. The previous budget returns afterwards.
  allocator_control& control = installed_adapter_now().control;
  control.change_budget(std::nullopt);
  const auto [lost, why] = s->close();  // ends the session whatever happens (Note [Session lifetime])
  if (configured) {
    control.restore_configured_budget();  // the session began before the device had its budget
  } else {
    control.change_budget(previous);  // throws when more is reserved now: the session has ended anyway
  }
  if (lost == 0) return {};
  return std::to_string(lost) + " saved tensor(s) could not be brought back when the budget ended, and raise "
         "an error if backward needs them; the first: " + why;
}

std::shared_ptr<budget_session> active_session() {
  session_registry& r = sessions();
  std::lock_guard lock(r.mutex);
  return r.active;
}

void session_step(bool resolve_ratio, std::optional<std::size_t> given_peak) {
  session_registry& r = sessions();
  std::shared_ptr<budget_session> s;
  std::optional<double> ratio;
  {
    std::lock_guard lock(r.mutex);
    if (!r.active) return;
    s = r.active;
    if (resolve_ratio) ratio = std::exchange(r.pending_ratio, std::nullopt);
  }
  if (ratio) {
    allocator_control& control = installed_adapter_now().control;
    const auto peak = given_peak ? static_cast<double>(*given_peak)
                                 : static_cast<double>(control.memory_stats().reserved_bytes.all().peak);
    const auto bytes = static_cast<std::size_t>(std::floor(*ratio * peak));
    if (bytes == 0) {
      // A ratio too small for the peak, or a step that allocated nothing
      // through tensorpager: say which, with the figure that would work.
      std::ostringstream m;
      m << std::setprecision(3) << "tensorpager: budget ratio " << *ratio << " of the first step's peak";
      if (peak > 0) {
        m << " of " << static_cast<long long>(peak) << " bytes rounds to 0 bytes; the smallest usable ratio is "
          << 1.0 / peak << " (one byte), and a useful one is far larger (0.5 to 0.9 of the peak)";
      } else {
        m << ": the first step allocated nothing through tensorpager (a peak of 0 bytes); give the budget in bytes";
      }
      throw invalid_argument(m.str());
    }
    control.release_cache();  // reserved-but-free memory must not stand in the way of the budget
    const auto in_use = control.memory_stats().reserved_bytes.all().current;
    const auto rt = s->runtime();
    check_budget_floor(bytes, {*ratio, static_cast<std::size_t>(peak), static_cast<std::size_t>(in_use),
                               rt ? rt->lowest_floor_bytes() : 0, rt ? rt->floor_stranded_bytes() : 0});  // Note [Budget floor]
    control.change_budget(bytes);
  }
  s->step();
}

bool session_remeasure() {
  session_registry& r = sessions();
  {
    std::lock_guard lock(r.mutex);
    if (!r.active || !r.ratio || r.pending_ratio) return false;
    r.pending_ratio = r.ratio;
  }
  // Note [A ratio is a share of a steady iteration] in budget_api.hpp.
  allocator_control& control = installed_adapter_now().control;
  control.change_budget(std::nullopt);
  control.release_cache();
  control.reset_peaks();
  return true;
}

std::map<std::string, std::int64_t> session_stats() {
  std::shared_ptr<budget_session> s;
  {
    session_registry& r = sessions();
    std::lock_guard lock(r.mutex);
    s = r.last;
  }
  if (!s) return {};
  const runtime_stats st = s->stats();
  const std::string p = "tensorpager.runtime.";
  return {
      {p + "active", s->closed() ? 0 : 1},
      {p + "steps", as_int(st.steps)},  // Note [A step is an iteration] in runtime/runtime_stats.hpp
      {p + "offloaded_bytes", as_int(st.offloaded_bytes)},
      {p + "prefetched_bytes", as_int(st.prefetched_bytes)},
      {p + "offloads", as_int(st.offloads)},
      {p + "prefetches", as_int(st.prefetches)},
      {p + "cancelled_offloads", as_int(st.cancelled_offloads)},
      {p + "proactive_offloads", as_int(st.proactive_offloads)},
      {p + "drops", as_int(st.drops)},
      {p + "recomputes", as_int(st.recomputes)},
      {p + "recomputed_bytes", as_int(st.recomputed_bytes)},
      {p + "evictions", as_int(st.evictions)},
      {p + "host_fallbacks", as_int(st.host_fallbacks)},
      {p + "shared_skips", as_int(st.shared_skips)},
      {p + "stalls", as_int(st.stalls)},
      {p + "stall_ns", st.stall_ns},
      {p + "policy_ns", st.policy_ns},
      {p + "policy_calls", as_int(st.policy_calls)},
      {p + "reclaims", as_int(st.reclaims)},
      {p + "reclaimed_bytes", as_int(st.reclaimed_bytes)},
      {p + "tracked", as_int(st.tracked)},
      {p + "resident_bytes", as_int(st.resident_bytes)},
      {p + "on_host_bytes", as_int(st.on_host_bytes)},
      {p + "dropped_bytes", as_int(st.dropped_bytes)},
      {p + "prefetch_distance", as_int(st.prefetch_distance)},
      {p + "floor_bytes", as_int(st.floor_bytes)},
  };
}

std::optional<saved_view> manage(const at::Tensor& t, bool* fresh) {
  const auto s = active_session();
  if (!s) return std::nullopt;
  auto storage = s->adopt(t, fresh);
  if (!storage) return std::nullopt;
  return saved_view::of(t, std::move(storage));
}

}  // namespace tp::hooks

namespace tensorpager {

namespace {
budget_options with_bytes(std::optional<std::size_t> bytes) {
  budget_options o;
  o.bytes = bytes;
  return o;
}
}  // namespace

budget_scope::budget_scope(std::optional<std::size_t> bytes) : budget_scope(with_bytes(bytes)) {}

budget_scope::budget_scope(const budget_options& opts) {
  tp::hooks::session_request req;
  req.bytes = opts.bytes;
  req.ratio = opts.ratio;
  if (!opts.policy.empty()) req.policy = tp::parse_policy_kind(opts.policy);
  req.prefetch_ahead = opts.prefetch;
  previous_ = tp::hooks::begin_session(req);
}

budget_scope::~budget_scope() {
  try {
    if (const std::string lost = tp::hooks::end_session(previous_); !lost.empty()) {
      std::fprintf(stderr, "tensorpager: %s\n", lost.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorpager: budget_scope could not end cleanly: %s\n", e.what());
  }
}

void step() { tp::hooks::session_step(); }

std::map<std::string, std::int64_t> runtime_stats() { return tp::hooks::session_stats(); }

bool budget_active() { return tp::hooks::active_session() != nullptr; }

}  // namespace tensorpager
