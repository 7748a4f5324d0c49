#include "sim/recompute_plan.hpp"

#include <algorithm>

namespace tp::sim {

recompute_plan recompute_plan::build(const trace& t) {
  const std::size_t n = t.storages.size();
  recompute_plan plan;
  plan.producer.assign(n, no_producer);
  plan.recomputable.assign(n, false);
  std::vector<std::size_t> freed_at(n, 0);
  std::vector<std::vector<std::size_t>> mutated_at(n);  // positions, ascending
  for (std::size_t e = 0; e < t.events.size(); ++e) {
    const event& ev = t.events[e];
    if (ev.what == event::kind::free) {
      freed_at[t.index_of(ev.id)] = e + 1;
    } else if (ev.what == event::kind::op) {
      for (storage_id id : t.ops[ev.op].mutates) mutated_at[t.index_of(id)].push_back(e + 1);
    }
  }
  // Positions are 1-based so that 0 means "never". A storage is "stable" over
  // (from, to) when no op in between writes it.
  auto stable = [&](std::size_t i, std::size_t from, std::size_t to) {
    const auto& m = mutated_at[i];
    const auto it = std::upper_bound(m.begin(), m.end(), from);
    return it == m.end() || *it >= to;
  };
  for (std::size_t e = 0; e < t.events.size(); ++e) {
    const event& ev = t.events[e];
    if (ev.what != event::kind::op) continue;
    const op_record& op = t.ops[ev.op];
    const std::size_t at = e + 1;
    for (storage_id id : op.outputs) {
      const std::size_t s = t.index_of(id);
      plan.producer[s] = ev.op;
      // s may be re-created until it is freed (or the trace ends): its inputs
      // must keep their contents over that window, and a pre-existing input
      // must outlive it (it has no producer to replay).
      const std::size_t until = freed_at[s] != 0 ? freed_at[s] : t.events.size() + 1;
      bool inputs_ok = true;
      for (const auto* list : {&op.inputs, &op.mutates}) {
        for (storage_id in : *list) {
          const std::size_t i = t.index_of(in);
          const bool outlives = freed_at[i] == 0 || freed_at[i] > until;
          const bool available = (t.storages[i].pre_existing && outlives) || plan.recomputable[i];
          inputs_ok = inputs_ok && stable(i, at, until) && available;
        }
      }
      plan.recomputable[s] = inputs_ok && stable(s, at, until);
    }
  }
  return plan;
}

}  // namespace tp::sim
