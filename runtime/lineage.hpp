#pragma once
// Which tracked tensors each tensor was computed from, and the equivalence
// classes of evicted tensors that DTR's heuristic prices (Kirisame et al.,
// ICLR 2021, section 4: "evicted neighbourhood", approximated by equivalence
// classes; their simulator's DTREqClass).
//
// Note [Evicted neighbourhood]
// Recomputing a dropped tensor t reruns its producer, which needs t's
// parents; a parent that is itself dropped is rerun first, and so on. So
// dropping t costs not only t's own recompute time but that of every evicted
// tensor connected to it: t's evicted neighbourhood. DTR approximates it with
// a union-find over evicted tensors: when a tensor is evicted it starts a
// class worth its own cost, merged with the class of every evicted neighbour
// (parent or child); when it is recomputed its cost leaves its class (the
// class is not split: DTR's approximation, cheap and an over-estimate). The
// price of evicting a resident t is then
//     cost(t) + sum of the values of the distinct classes of t's evicted
//     neighbours.
// "Evicted" means dropped (to recompute) or no longer tracked: a tensor whose
// last reference went is, to DTR, evicted eagerly, and a dependent's rerun
// re-creates it (the trace simulator does, Note [Re-created storages] in
// sim/simulator.cpp), so its cost counts. A swapped tensor is not evicted in
// this sense: it comes back by copy, not by rerun.
//
// Untracked tensors stay as nodes ("ghosts") until the next step boundary,
// where prune() keeps only tracked tensors and rebuilds the classes, so the
// graph holds at most one step of history. A caller that re-creates an
// untracked tensor passes its old id to add() (`revive`) and the node, with
// its edges, becomes the new tensor's. Everything here is O(degree) per call
// with path compression; nothing scans all tensors except prune().

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/managed_tensor.hpp"

namespace tp {

/// Thread-safety: none; guarded by the runtime's lock. A value type.
class lineage {
 public:
  /// Adds tracked tensor `id` with recompute cost `cost_ns`, computed from
  /// `parents` (ids not in the graph are ignored). With `revive`, the node of
  /// that untracked tensor becomes id's instead (its parents are kept and
  /// `parents` is ignored); it is no longer evicted.
  void add(tensor_id id, std::int64_t cost_ns, std::span<const tensor_id> parents,
           std::optional<tensor_id> revive = std::nullopt);
  /// The tensor's recompute cost changed (an in-place write it must rerun).
  void set_cost(tensor_id id, std::int64_t cost_ns);
  /// The tensor was dropped: Note [Evicted neighbourhood].
  void evicted(tensor_id id);
  /// The tensor was recomputed: its cost leaves its class.
  void restored(tensor_id id);
  /// The tensor is no longer tracked: evicted (if it was not) and kept as a
  /// ghost until prune().
  void untracked(tensor_id id);
  /// The summed values of the distinct classes of id's evicted neighbours (0
  /// for an unknown id).
  std::int64_t neighbourhood_cost(tensor_id id);
  /// The summed costs of id's parents that are evicted now (0 for an unknown
  /// id): what a rerun of id needs beyond id itself, one level deep.
  std::int64_t evicted_parents_cost(tensor_id id) const;
  /// Drops ghosts and rebuilds the classes of the evicted tracked tensors.
  /// O(nodes + edges).
  void prune();
  /// Nodes held, ghosts included.
  std::size_t size() const { return nodes_.size(); }
  bool knows(tensor_id id) const { return index_.count(to_underlying(id)) != 0; }

 private:
  static constexpr std::uint32_t none = UINT32_MAX;
  struct node {
    std::uint64_t id = 0;
    std::int64_t cost_ns = 0;
    std::int64_t class_share = 0;  // what this node added to its class
    std::uint32_t cls = none;      // union-find element while evicted
    bool ghost = false;
    std::vector<std::uint32_t> parents;
    std::vector<std::uint32_t> children;
  };
  struct class_elem {
    std::uint32_t parent;
    std::int64_t value_ns;
  };
  std::uint32_t find(std::uint32_t c);
  std::uint32_t index(tensor_id id) const;
  void evict_node(std::uint32_t n);

  std::vector<node> nodes_;
  std::unordered_map<std::uint64_t, std::uint32_t> index_;
  std::vector<class_elem> classes_;
  std::vector<std::uint32_t> seen_;  // scratch of neighbourhood_cost
};

}  // namespace tp
