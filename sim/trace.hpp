#pragma once
// The simulator's model of a recorded training step (docs/trace_format.md):
// storages that exist before the step, then an ordered list of events
// (operators, frees, step boundaries). Read from tensorpager's own format
// (trace_io.hpp) or imported from DTR's operator logs (dtr_import.hpp).
//
// Note [Storages, not tensors]
// The unit of memory is a storage: views share their base's storage and cost
// nothing, an in-place operator writes an existing storage (it is listed in
// `mutates`, not in `outputs`). Each storage id is allocated once (by the
// operator that lists it as an output, or before the step when it is
// pre-existing) and freed at most once (a free event); ids are never reused.
// Storages still live when the last step ends are the step's outputs.

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace tp::sim {

/// Identifies a storage within one trace.
using storage_id = std::uint64_t;

enum class phase : unsigned char { forward, backward };

const char* to_string(phase p);

/// One storage. A value.
struct storage {
  storage_id id = 0;
  std::size_t bytes = 0;
  /// Exists before the first step (weights, inputs): allocated first, never
  /// managed by the runtime (not evictable).
  bool pre_existing = false;
  /// Saved for backward: the runtime tracks it (evictable by swap, or by
  /// recompute when the simulator can replay its producer).
  bool saved = false;
  std::string label;  ///< optional (parameter name); may be empty
};

/// One operator call. A value.
struct op_record {
  std::string name;
  std::vector<storage_id> inputs;   ///< storages read (may repeat; views mapped to their base)
  std::vector<storage_id> outputs;  ///< storages this call allocates
  std::vector<storage_id> mutates;  ///< storages written in place (also read)
  std::int64_t time_ns = 0;         ///< >= 0
  phase when = phase::forward;
  std::string module;  ///< optional module label
};

struct event {
  enum class kind : unsigned char { op, free, step } what = kind::op;
  std::size_t op = 0;     ///< index into trace::ops (kind::op)
  storage_id id = 0;      ///< the storage freed (kind::free)
};

/// A whole trace. Storages are indexed by id through index_of().
///
/// Thread-safety: a value; const members may be read concurrently.
struct trace {
  std::vector<storage> storages;  ///< every storage, pre-existing first
  std::vector<op_record> ops;
  std::vector<event> events;      ///< in order; kind::step separates steps
  std::string source;             ///< "tensorpager", "dtr", ... (informational)
  double compute_scale = 1.0;     ///< already applied to time_ns (informational)

  /// The position of storage `id` in storages. Throws tp::error naming the id
  /// when it is unknown. Requires: build_index() was called after the last
  /// change to storages.
  std::size_t index_of(storage_id id) const;
  void build_index();
  /// Checks Note [Storages, not tensors] and that every op refers to known,
  /// live storages; throws tp::error naming `what` (the file) and the first
  /// offending event. Calls build_index().
  void validate(const std::string& what);
  /// Sum of every op's time_ns (one pass over the events).
  std::int64_t compute_ns() const;
  std::size_t steps() const;

 private:
  std::unordered_map<storage_id, std::size_t> index_;  // id -> position in storages
};

}  // namespace tp::sim
