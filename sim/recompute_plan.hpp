#pragma once
// Which storages of a trace the simulator can re-create by replaying their
// producing operator, and at what cost.
//
// Note [Recomputable storages]
// A storage s output by op p is recomputable when, over the window from p to
// the free of s (or the end of the trace), where a re-creation can happen,
//  - nothing mutates s (a replay of p alone would miss the write),
//  - nothing mutates an input of p (the replay would read another version;
//    an optimizer updating the weights after the last use is fine), and
//  - every input of p is pre-existing and outlives the window, or is
//    recomputable itself (so a chain of replays always bottoms out).
// An input that is live when s is recomputed is made resident through the
// runtime; one already freed is re-created for the replay and freed after it
// (the chain's cost is paid). A replay re-creates only s, not p's other
// outputs. Pre-existing storages are never recomputable.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/trace.hpp"

namespace tp::sim {

/// Per storage (indexed like trace::storages). A value; pure to build.
struct recompute_plan {
  static constexpr std::size_t no_producer = SIZE_MAX;
  std::vector<std::size_t> producer;  ///< index into trace::ops, or no_producer
  std::vector<bool> recomputable;
  /// Requires: t validated. Times are scaled by compute_scale.
  static recompute_plan build(const trace& t);
};

}  // namespace tp::sim
