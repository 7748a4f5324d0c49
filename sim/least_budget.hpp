#pragma once
// The least budget any policy could meet on a trace: what no eviction can
// give back, at its worst.
//
// Note [Least budget]
// While an operator runs, the simulator holds resident: every live storage
// the runtime does not track (pre-existing ones, and temporaries not saved
// for backward), less those lent (Note [Lending in the simulator]); the
// operator's tracked inputs, pinned (Note [Operator inputs are pinned] in
// simulator.cpp); and its outputs. Their sum, each rounded to the
// allocator's block size, is what the allocator must hold at that operator
// whatever the policy evicts, so its maximum over the trace bounds every
// policy's budget from below (re-creating dropped storages only adds). A
// budget below it cannot fit: tp-sim says so up front, with the operator,
// as a live budget below its floor is refused at the first step. Reserved
// bytes can exceed it (fragmentation), so it is a bound, not a promise.

#include <cstddef>
#include <string>

#include "sim/trace.hpp"

namespace tp::sim {

struct lend_plan;

/// A value.
struct least_budget {
  std::size_t bytes = 0;  ///< Note [Least budget]
  std::size_t op = 0;     ///< index into trace::ops of the operator where it is reached
  /// Of bytes, the untracked storages held then (the operator's untracked
  /// inputs among them); the rest is its outputs and tracked inputs.
  std::size_t held = 0;
};

/// Requires: t validated; `lending` built from t, or nullptr (nothing lent).
least_budget find_least_budget(const trace& t, const lend_plan* lending);

}  // namespace tp::sim
