#pragma once
// The process's budget session (at most one at a time) behind
// tensorpager::budget_scope, tensorpager::step() and the Python tp.budget().
// Internal to hooks/. Includes torch.
//
// Note [Ratio budgets]
// A budget given as a ratio is a share of the first step's unconstrained
// peak: the session starts with no budget, resets the peak statistics, and
// at the first step boundary sets the budget to floor(ratio x peak reserved
// bytes of that step). Until then nothing is evicted.
//
// Note [A ratio measures its first step]
// The session empties the allocator's cache before it resets the peaks: a
// peak of reserved bytes counts the cache that earlier work left, which is
// not the step's, so the same model's budget would depend on what ran
// before it in the process.
// Measured: docs/decisions.md, Note [A ratio measures its first step].

// Note [A ratio is a share of a steady iteration]
// The first iteration is not a steady one. A script that calls zero_grad()
// just before backward() keeps the previous gradients and the optimizer's
// momentum through the next forward; with gradient accumulation the
// optimizer's state does not exist until the first optimizer step. A ratio
// of the first iteration's peak then caps a budget that the second iteration
// cannot keep. So the
// Python tracker (_tracker.py) steps without resolving the ratio until an
// iteration that began after an optimizer step has ended, and the peak it
// resolves on is that of every iteration since the session began; where no
// optimizer steps, the first iteration's, as before. An optimizer that steps
// for the first time after the ratio was resolved makes the tracker measure
// again (session_remeasure): the budget is lifted, and resolved anew once a
// steady iteration has ended.
// Measured: docs/decisions.md, Note [A ratio is a share of a steady iteration].

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>

#include "hooks/budget/budget_session.hpp"
#include "hooks/budget/saved_view.hpp"

namespace tp::hooks {

struct session_request {
  std::optional<std::size_t> bytes;  ///< the budget in bytes, if given
  std::optional<double> ratio;       ///< a ratio in (0, 1] of the first step's peak, if given
  std::optional<policy_kind> policy; ///< none: the configuration's `policy` key
  bool prefetch_ahead = true;
};

/// Starts the session: builds the runtime over the installed adapter's
/// current device and sets the budget (bytes now; a ratio at the first step,
/// Note [Ratio budgets]). Returns the budget that was in force, for
/// end_session(). Throws tp::error when nothing is installed or a session is
/// active, tp::invalid_argument for a budget below memory in use or a ratio
/// outside (0, 1] (nothing changes then).
std::optional<std::size_t> begin_session(const session_request& req);
/// Ends the active session (Note [Session lifetime]) and restores `previous`
/// as the budget. Always ends it, so that another may begin. Does nothing
/// without a session. Returns what was lost (saved tensors that could not be
/// brought back), or "" when nothing was. Throws tp::invalid_argument when
/// `previous` is below what is reserved now (the session has ended; the
/// budget stays lifted).
std::string end_session(std::optional<std::size_t> previous);
/// The active session, or nullptr.
std::shared_ptr<budget_session> active_session();
/// A step boundary: the runtime learns the step; a pending ratio budget is
/// resolved when resolve_ratio is true (Note [A ratio is a share of a steady
/// iteration]), on `peak` where given, else on the peak reserved since the
/// peaks were reset (a program that changed how it runs keeps the peak it had:
/// Note [A partitioner budget for compiled regions] in
/// python/tensorpager/_partitioner.py). Does nothing without a session.
void session_step(bool resolve_ratio = true, std::optional<std::size_t> peak = std::nullopt);
/// Measures the ratio again: lifts the budget a ratio was resolved to,
/// empties the cache, resets the peaks and resolves the ratio at a later
/// session_step (Note [A ratio is a share of a steady iteration]). Returns
/// false, changing nothing, without a session, a ratio, or while the ratio
/// is still pending.
bool session_remeasure();
/// The runtime's counters under "tensorpager.runtime.*" names, of the active
/// session or else the last one; empty when there has been none.
std::map<std::string, std::int64_t> session_stats();
/// Manages t's storage under the active session: nullopt when there is none
/// or t is not manageable (budget_session::adopt).
std::optional<saved_view> manage(const at::Tensor& t, bool* fresh = nullptr);

}  // namespace tp::hooks
