#pragma once
// An importer for the operator logs of DTR's prototype (Kirisame et al.,
// ICLR 2021; format in bench/traces/dtr/README.md) into a sim::trace.
//
// Note [DTR references]
// A DTR log names references, not tensors: COPY adds a reference to a
// tensor, COPY_FROM re-points one, RELEASE drops one. The importer keeps a
// reference count per tensor and, per storage, the set of live tensors on it
// (a view, ALIAS k, is a tensor on argument k's storage, of size zero). A
// storage is freed (a free event) when its last tensor loses its last
// reference. MUTATE is an op that reads its arguments and writes the mutated
// ones in place: their storages go to `mutates`, no bytes are allocated
// (DTR's "new version of the same storage size" occupies the same memory).
// CONSTANT tensors are pre-existing storages, and they are never freed:
// DTR's simulator pins every constant, so an operator that read one can
// always be replayed. Freeing a constant when its last reference went would
// leave storages impossible to recompute (an operator that read it, or one
// computed from such an operator's output, could not be replayed); keeping
// constants costs little of the unconstrained peak of live bytes
// (measured: docs/decisions.md, Note [DTR references]). Every CALL result with
// storage of its own is marked saved: DTR treats every non-constant tensor as
// evictable, and so does the simulator for these traces. A result of 0 bytes
// is given no storage (nothing to allocate; reading it costs nothing).

#include <iosfwd>
#include <string>

#include "sim/trace.hpp"

namespace tp::sim {

/// Parses a DTR log; `what` names the input in errors. Throws tp::error
/// naming `what`, the line and the instruction when a line is malformed or
/// names an unknown reference. Thread-safety: none needed.
trace import_dtr_log(std::istream& in, const std::string& what);
trace import_dtr_file(const std::string& path);

/// True when the first non-blank line of `path` is a DTR instruction object
/// (has "INSTRUCTION"), or the file name ends in ".log".
bool looks_like_dtr(const std::string& path);

}  // namespace tp::sim
