#pragma once
// The policy interface: which resident tensor leaves the device next, and how
// (swap or drop). One file per strategy (lru_policy, dtr_policy,
// capuchin_policy, hybrid_policy).
//
// Note [Cheap victim choice]
// choose() sees the candidates through candidate_set (O(1) random access and
// LRU order), never a list of every tracked tensor: LRU reads the front of the
// list, Capuchin scores a random sample of k candidates, hybrid looks up a
// plan made once per step. DTR scores every candidate, as DTR's simulator,
// which it is the baseline of (dtr_policy.hpp). DTR's prototype spent more
// on bookkeeping than on recomputation; the runtime measures choose()
// (stats.policy_ns).
//
// Note [Adjacent victims]
// Freeing neighbouring blocks frees a contiguous range, which the caching
// allocator can merge and reuse for a larger request (Coop). Policies that
// score samples break ties (scores within adjacency_tolerance) in favour of a
// candidate whose block touches the previous victim's block.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include "runtime/access_recorder.hpp"
#include "runtime/candidate_set.hpp"
#include "runtime/copy_cost_model.hpp"
#include "runtime/lineage.hpp"
#include "runtime/managed_tensor.hpp"
#include "runtime/policy_kind.hpp"
#include "runtime/step_planner.hpp"

namespace tp {

/// Parses "lru", "dtr", "capuchin", "hybrid"; throws tp::config_error naming
/// the input and the accepted values.
policy_kind parse_policy_kind(const std::string& name);

/// What a policy may read when choosing. All references outlive the call.
struct policy_context {
  const candidate_set& candidates;
  std::int64_t now_ns = 0;
  /// Bytes still to free in this reclaim.
  std::size_t bytes_needed = 0;
  /// The recorded previous step (nullptr before the first boundary) and the
  /// current step's time, for next-use lookups (Note [Step matching]).
  const step_record* previous = nullptr;
  std::int64_t step_time_ns = 0;
  /// What copies cost, measured (Note [Copy cost model]).
  copy_cost_model copies{};
  std::mt19937_64& rng;
  /// [begin, end) of the previous victim's block in this reclaim, or 0s.
  std::uintptr_t last_victim_begin = 0;
  std::uintptr_t last_victim_end = 0;
  /// The tensors' lineage (Note [Evicted neighbourhood]); nullptr: none.
  lineage* graph = nullptr;
};

struct eviction_choice {
  managed_tensor* victim = nullptr;
  eviction_action action = eviction_action::swap;
};

/// Inputs to a once-per-step plan.
struct planning_inputs {
  /// The device budget, if any.
  std::optional<std::size_t> budget_bytes;
  /// Bytes the runtime does not manage (weights, gradients, workspace), as
  /// observed at the recorded step's peak.
  std::size_t unmanaged_bytes = 0;
  /// What copies cost, measured (Note [Copy cost model]).
  copy_cost_model copies{};
};

// Note [Two ways to look ahead]
// Both ways learn from the previous step's access sequence (Note [Step
// matching]); they differ in who decides. A policy that plans (hybrid)
// decides once per step, for each tensor, whether to swap it, drop it or
// keep it, and when to bring it back, and the runtime carries that plan out
// (prefetching ahead only what a reclaim swapped against it).
// A policy that does not (lru, dtr, capuchin) keeps the reactive rule its
// paper defines, and the runtime adds the same generic lookahead to each:
// prefetch ahead of the recorded next use, offload ahead of a recorded peak.
// Two stay because the reactive three are the baselines the planner is
// measured against: giving them the plan would make them the planner, and
// taking the lookahead away would compare a planner with policies that wait
// for an out-of-memory. One goes when a GPU run shows the plan at or below
// the better of them at every budget and copy bandwidth (issue 32); until
// then the choice is the policy's, through plan().

/// Thread-safety: none; called with the runtime's lock held.
class eviction_policy {
 public:
  virtual ~eviction_policy() = default;
  virtual policy_kind kind() const = 0;
  /// The next victim and its action, or nullopt when candidates is empty.
  /// A drop is only chosen for a recomputable tensor.
  virtual std::optional<eviction_choice> choose(const policy_context& ctx) = 0;
  /// True for a policy that evicts by recompute whatever it can drop (dtr,
  /// Note [DTR is recompute only] in dtr_policy.hpp): the runtime never
  /// turns its drops into copies (Note [Recompute limit]).
  virtual bool recompute_only() const { return false; }
  /// Called at each step boundary with the step just recorded.
  virtual void plan_step(const step_record& /*recorded*/, const planning_inputs& /*in*/) {}
  /// The plan for the step now running, which the runtime carries out
  /// (Note [Carrying out a plan] in runtime_plan.cpp); nullptr: none, the
  /// runtime prefetches ahead and offloads proactively instead (Note [Two
  /// ways to look ahead]).
  virtual const step_plan* plan() const { return nullptr; }
};

/// Builds the policy of that kind. sample_size is k for the sampling policies.
std::unique_ptr<eviction_policy> make_policy(policy_kind kind, std::size_t sample_size = 32);

namespace detail {

/// True when t's block touches [begin, end) (Note [Adjacent victims]).
bool adjacent_to(const managed_tensor& t, std::uintptr_t begin, std::uintptr_t end);

/// Draws up to k distinct-ish candidates (with replacement when k >= size,
/// every candidate exactly once) and returns the one with the lowest score;
/// ties within `tolerance` (relative) prefer an adjacent block.
template <class Score>
managed_tensor* sample_min(const policy_context& ctx, std::size_t k, Score score) {
  const candidate_set& c = ctx.candidates;
  if (c.empty()) return nullptr;
  constexpr double tolerance = 1e-9;
  managed_tensor* best = nullptr;
  double best_score = 0;
  bool best_adjacent = false;
  auto consider = [&](managed_tensor& t) {
    const double s = score(t);
    const bool adj = adjacent_to(t, ctx.last_victim_begin, ctx.last_victim_end);
    if (best == nullptr) {
      best = &t, best_score = s, best_adjacent = adj;
      return;
    }
    // An infinite score (dtr: not droppable) ties only with another: a finite
    // one is lower, however large.
    const double scale = std::max(std::abs(s), std::abs(best_score));
    const bool tie = s == best_score || (std::isfinite(scale) && std::abs(s - best_score) <= tolerance * scale);
    if ((!tie && s < best_score) || (tie && adj && !best_adjacent)) {
      best = &t, best_score = s, best_adjacent = adj;
    }
  };
  if (c.size() <= k) {
    for (std::size_t i = 0; i < c.size(); ++i) consider(c.at(i));
  } else {
    std::uniform_int_distribution<std::size_t> pick(0, c.size() - 1);
    for (std::size_t i = 0; i < k; ++i) consider(c.at(pick(ctx.rng)));
  }
  return best;
}

}  // namespace detail
}  // namespace tp
