#include "profiler/sim/recompute_plan.hpp"

namespace tp::sim {

recompute_plan recompute_plan::build(const trace& t) {
  const std::size_t n = t.storages.size();
  recompute_plan plan;
  plan.producer.assign(n, no_producer);
  plan.recomputable.assign(n, false);
  std::vector<std::size_t> last_mutation(n, 0), freed_at(n, 0);
  for (std::size_t e = 0; e < t.events.size(); ++e) {
    const event& ev = t.events[e];
    if (ev.what == event::kind::free) {
      freed_at[t.index_of(ev.id)] = e + 1;
    } else if (ev.what == event::kind::op) {
      for (storage_id id : t.ops[ev.op].mutates) last_mutation[t.index_of(id)] = e + 1;
    }
  }
  // Positions are 1-based so that 0 means "never".
  for (std::size_t e = 0; e < t.events.size(); ++e) {
    const event& ev = t.events[e];
    if (ev.what != event::kind::op) continue;
    const op_record& op = t.ops[ev.op];
    const std::size_t at = e + 1;
    for (storage_id id : op.outputs) {
      const std::size_t s = t.index_of(id);
      plan.producer[s] = ev.op;
      // A pre-existing input must outlive s (it has no producer to replay).
      bool inputs_ok = true;
      for (const auto* list : {&op.inputs, &op.mutates}) {
        for (storage_id in : *list) {
          const std::size_t i = t.index_of(in);
          const bool stable = last_mutation[i] <= at;
          const bool outlives = freed_at[i] == 0 || (freed_at[s] != 0 && freed_at[i] > freed_at[s]);
          const bool available = (t.storages[i].pre_existing && outlives) || plan.recomputable[i];
          inputs_ok = inputs_ok && stable && available;
        }
      }
      plan.recomputable[s] = inputs_ok && last_mutation[s] <= at;
    }
  }
  return plan;
}

}  // namespace tp::sim
