#include "sim/recompute_plan.hpp"

#include <algorithm>

namespace tp::sim {

recompute_plan recompute_plan::build(const trace& t) {
  const std::size_t n = t.storages.size();
  recompute_plan plan;
  plan.producer.assign(n, no_producer);
  plan.writers.assign(n, {});
  plan.recomputable.assign(n, false);
  std::vector<std::size_t> freed_at(n, 0);
  std::vector<std::size_t> produced_at(n, 0);
  std::vector<std::vector<std::size_t>> mutated_at(n);  // positions, ascending
  std::vector<std::size_t> op_at(t.ops.size(), 0);
  for (std::size_t e = 0; e < t.events.size(); ++e) {
    const event& ev = t.events[e];
    if (ev.what == event::kind::free) {
      freed_at[t.index_of(ev.id)] = e + 1;
    } else if (ev.what == event::kind::op) {
      op_at[ev.op] = e + 1;
      for (storage_id id : t.ops[ev.op].mutates) {
        const std::size_t i = t.index_of(id);
        if (mutated_at[i].empty() || mutated_at[i].back() != e + 1) {
          mutated_at[i].push_back(e + 1);
          plan.writers[i].push_back(ev.op);
        }
      }
      for (storage_id id : t.ops[ev.op].outputs) {
        const std::size_t i = t.index_of(id);
        plan.producer[i] = ev.op;
        produced_at[i] = e + 1;
      }
    }
  }
  // Positions are 1-based so that 0 means "never". A storage is "stable" over
  // (from, to) when no op in between writes it.
  auto stable = [&](std::size_t i, std::size_t from, std::size_t to) {
    const auto& m = mutated_at[i];
    const auto it = std::upper_bound(m.begin(), m.end(), from);
    return it == m.end() || *it >= to;
  };
  // Whether op `q` at position `at` can be replayed for storage s up to `until`.
  auto replayable = [&](std::size_t q, std::size_t s, std::size_t at, std::size_t until) {
    const op_record& op = t.ops[q];
    for (storage_id w : op.mutates) {
      if (t.index_of(w) != s) return false;
    }
    for (const auto* list : {&op.inputs, &op.mutates}) {
      for (storage_id in : *list) {
        const std::size_t i = t.index_of(in);
        if (i == s) continue;
        const bool outlives = freed_at[i] == 0 || freed_at[i] > until;
        const bool earlier = produced_at[i] != 0 && produced_at[i] < produced_at[s];
        const bool available =
            (t.storages[i].pre_existing && outlives) || (plan.recomputable[i] && earlier);
        if (!available || !stable(i, at, until)) return false;
      }
    }
    return true;
  };
  // In trace order: a storage's verdict uses only storages produced before it.
  for (std::size_t e = 0; e < t.events.size(); ++e) {
    const event& ev = t.events[e];
    if (ev.what != event::kind::op) continue;
    for (storage_id id : t.ops[ev.op].outputs) {
      const std::size_t s = t.index_of(id);
      const std::size_t until = freed_at[s] != 0 ? freed_at[s] : t.events.size() + 1;
      bool ok = replayable(ev.op, s, e + 1, until);
      for (std::size_t q : plan.writers[s]) ok = ok && replayable(q, s, op_at[q], until);
      plan.recomputable[s] = ok;
    }
  }
  return plan;
}

}  // namespace tp::sim
