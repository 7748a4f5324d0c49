#pragma once
// Which storages of a trace the simulator can re-create by replaying their
// producing operator (and the in-place operators that wrote them since), and
// at what cost.
//
// Note [Recomputable storages]
// A storage s output by op p may be written in place later (relu_, add_: the
// ops that list s in `mutates`). Its contents at a point T of the trace are
// p's output with the writes before T applied, so re-creating s at T replays
// p and then those writes, in order: the version a reader needs is the one
// DTR's logs name (DTR's simulator turns each in-place op into a new version
// of the storage, whose parents are the op's arguments). s is recomputable
// when, over the window from p to the free of s (or the end of the trace),
// where a re-creation can happen, for p and for every op that writes s:
//  - the op writes nothing but s (a replay must not write another storage a
//    second time);
//  - every other storage it reads keeps its contents from the op until the
//    window ends (a replay reads the same version; an optimizer updating the
//    weights after the last use is fine), and
//  - that storage is pre-existing and outlives the window, or is
//    recomputable itself and was produced before p (so a chain of replays
//    always bottoms out, and never needs s to re-create s).
// An input that is live when s is recomputed is made resident through the
// runtime; one already freed is re-created for the replay (the chain's cost
// is paid). A replay re-creates only s, not p's other outputs. Pre-existing
// storages are never recomputable.
// Accepting writes is what lets anything computed from a storage written in
// place be dropped (history: docs/decisions.md, Note [Recomputable storages]).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/trace.hpp"

namespace tp::sim {

/// Per storage (indexed like trace::storages). A value; pure to build.
struct recompute_plan {
  static constexpr std::size_t no_producer = SIZE_MAX;
  std::vector<std::size_t> producer;  ///< index into trace::ops, or no_producer
  /// Ops (indices into trace::ops) that write the storage in place, in trace
  /// order (a replay re-applies the first k of them for the k-th version).
  std::vector<std::vector<std::size_t>> writers;
  std::vector<bool> recomputable;
  /// Requires: t validated.
  static recompute_plan build(const trace& t);
};

}  // namespace tp::sim
