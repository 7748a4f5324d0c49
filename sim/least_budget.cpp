#include "sim/least_budget.hpp"

#include <algorithm>
#include <vector>

#include "allocator/size_policy.hpp"
#include "sim/lend_plan.hpp"

namespace tp::sim {

least_budget find_least_budget(const trace& t, const lend_plan* lending) {
  enum class state : unsigned char { dead, held, evictable };
  std::vector<state> s(t.storages.size(), state::dead);
  std::vector<std::size_t> bytes(t.storages.size());
  std::size_t held = 0;  // bytes of the storages in state::held
  for (std::size_t i = 0; i < t.storages.size(); ++i) {
    bytes[i] = size_policy::block_size(t.storages[i].bytes);
    if (t.storages[i].pre_existing) {
      s[i] = state::held;
      held += bytes[i];
    }
  }
  const auto set = [&](std::size_t i, state to) {
    if (s[i] == state::held) held -= bytes[i];
    if (to == state::held) held += bytes[i];
    s[i] = to;
  };
  least_budget worst;
  std::vector<std::size_t> own;  // the op's storages, deduplicated
  for (std::size_t k = 0; k < t.events.size(); ++k) {
    if (lending != nullptr) {
      for (std::size_t i : lending->give_back_before[k]) set(i, state::held);
      for (std::size_t i : lending->lend_before[k]) set(i, state::evictable);
    }
    const event& e = t.events[k];
    if (e.what == event::kind::free) {
      set(t.index_of(e.id), state::dead);
      continue;
    }
    if (e.what != event::kind::op) continue;
    const op_record& op = t.ops[e.op];
    own.clear();
    for (const auto* list : {&op.inputs, &op.mutates}) {
      for (storage_id id : *list) {
        const std::size_t i = t.index_of(id);
        if (s[i] == state::evictable) own.push_back(i);
      }
    }
    for (storage_id id : op.outputs) own.push_back(t.index_of(id));
    std::sort(own.begin(), own.end());
    own.erase(std::unique(own.begin(), own.end()), own.end());
    std::size_t need = held;
    for (std::size_t i : own) need += bytes[i];
    if (need > worst.bytes) worst = {need, e.op, held};
    for (storage_id id : op.outputs) {
      const std::size_t i = t.index_of(id);
      set(i, t.storages[i].saved ? state::evictable : state::held);
    }
  }
  return worst;
}

}  // namespace tp::sim
