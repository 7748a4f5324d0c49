#include "sim/lend_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace tp::sim {
namespace {

constexpr std::ptrdiff_t none = -1;

// The backward windows of Note [Lending in the simulator]: [first, last]
// event positions of each run of backward ops.
std::vector<std::pair<std::size_t, std::size_t>> backward_windows(const trace& t) {
  std::vector<std::pair<std::size_t, std::size_t>> windows;
  std::ptrdiff_t first = none, last = none;
  const auto close = [&] {
    if (first != none) windows.emplace_back(static_cast<std::size_t>(first), static_cast<std::size_t>(last));
    first = last = none;
  };
  for (std::size_t k = 0; k < t.events.size(); ++k) {
    const event& e = t.events[k];
    if (e.what == event::kind::step) {
      close();
    } else if (e.what == event::kind::op) {
      if (t.ops[e.op].when != phase::backward) {
        close();
        continue;
      }
      if (first == none) first = static_cast<std::ptrdiff_t>(k);
      last = static_cast<std::ptrdiff_t>(k);
    }
  }
  close();
  return windows;
}

}  // namespace

lend_plan lend_plan::build(const trace& t) {
  const std::size_t n = t.events.size();
  lend_plan p;
  p.give_back_before.resize(n + 1);
  p.lend_before.resize(n + 1);

  // Where each storage is created (none: pre-existing) and freed (n: never).
  std::vector<std::ptrdiff_t> created(t.storages.size(), none);
  std::vector<std::size_t> freed(t.storages.size(), n);
  for (std::size_t k = 0; k < n; ++k) {
    const event& e = t.events[k];
    if (e.what == event::kind::op) {
      for (storage_id id : t.ops[e.op].outputs) created[t.index_of(id)] = static_cast<std::ptrdiff_t>(k);
    } else if (e.what == event::kind::free) {
      freed[t.index_of(e.id)] = k;
    }
  }

  std::vector<std::ptrdiff_t> last_use(t.storages.size());
  for (const auto& [first, last] : backward_windows(t)) {
    std::fill(last_use.begin(), last_use.end(), none);
    for (std::size_t k = first; k <= last; ++k) {
      const event& e = t.events[k];
      if (e.what != event::kind::op) continue;
      const op_record& op = t.ops[e.op];
      for (const auto* list : {&op.inputs, &op.mutates, &op.outputs}) {
        for (storage_id id : *list) last_use[t.index_of(id)] = static_cast<std::ptrdiff_t>(k);
      }
    }
    const auto window_start = static_cast<std::ptrdiff_t>(first);
    const auto window_end = static_cast<std::ptrdiff_t>(last);
    for (std::size_t i = 0; i < t.storages.size(); ++i) {
      // Live in the window and after it, and not tracked already.
      if (t.storages[i].saved || created[i] >= window_end || freed[i] <= last) continue;
      const std::ptrdiff_t at = last_use[i] != none ? last_use[i] + 1 : std::max(window_start, created[i] + 1);
      if (at > window_end) continue;  // used by the window's last op: nothing to gain
      p.lend_before[static_cast<std::size_t>(at)].push_back(i);
      p.give_back_before[last + 1].push_back(i);
    }
  }
  return p;
}

}  // namespace tp::sim
