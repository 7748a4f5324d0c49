#pragma once
// What the simulator lends to the runtime during each backward, and when it
// gives it back: the trace-driven counterpart of the program's lending
// (Note [Lending parameters and gradients] in python/tensorpager/_lend.py).
//
// Note [Lending in the simulator]
// A live budget lends the runtime the parameters, gradients and optimizer
// state that the backward no longer needs, and takes them all back when the
// backward ends. A trace does not say which storage is a parameter, so the
// simulator lends by what the trace does say. A backward window is a run of
// backward ops, cut by a forward op or a step boundary. Lendable in a window:
// every storage that is not saved (saved ones are tracked anyway), that is
// live in the window and still live after it: pre-existing storages
// (weights, optimizer state, the input batch) and what the window produces
// for later (gradients). Each is lent after its last use in the window (at
// the window's start if the window never uses it), as the program lends a
// parameter and its gradient once its AccumulateGrad has run and optimizer
// state when the backward starts; a storage whose last use is the window's
// last op is not lent at all. Everything lent is given back right after the
// window's last op: restored through the runtime and untracked, as the
// engine callback that ends a live backward does. A lent storage is swapped,
// never dropped (it has no producer to replay). The one storage the program
// would not lend and the simulator does is the input batch, after the stem's
// backward has read it for the last time: a few ops before the window ends.

#include <cstddef>
#include <vector>

#include "sim/trace.hpp"

namespace tp::sim {

/// Per event position of a trace (0 .. events.size(); the last is the end
/// of the trace): the storages (indices into trace::storages) given back,
/// then the storages lent, before the event at that position runs. A value;
/// pure to build.
struct lend_plan {
  std::vector<std::vector<std::size_t>> give_back_before;
  std::vector<std::vector<std::size_t>> lend_before;
  /// Requires: t validated. Every lent storage is given back later.
  static lend_plan build(const trace& t);
};

}  // namespace tp::sim
