#include "sim/trace.hpp"

#include <fmt/format.h>

#include <unordered_set>

#include "core/errors.hpp"

namespace tp::sim {

const char* to_string(phase p) { return p == phase::forward ? "forward" : "backward"; }

void trace::build_index() {
  index_.clear();
  index_.reserve(storages.size());
  for (std::size_t i = 0; i < storages.size(); ++i) index_.emplace(storages[i].id, i);
}

std::size_t trace::index_of(storage_id id) const {
  const auto it = index_.find(id);
  if (it == index_.end()) throw error(fmt::format("trace: storage {} is not declared", id));
  return it->second;
}

void trace::validate(const std::string& what) {
  build_index();
  if (index_.size() != storages.size()) {
    throw error(fmt::format("{}: a storage id is declared twice", what));
  }
  bool ops_seen = false;
  for (const storage& s : storages) {
    if (s.pre_existing && ops_seen) {
      throw error(fmt::format("{}: pre-existing storage {} is declared after a produced one", what, s.id));
    }
    ops_seen = ops_seen || !s.pre_existing;
  }
  // live: allocated and not freed. Pre-existing storages are live from the start.
  std::unordered_set<storage_id> live, born;
  for (const storage& s : storages) {
    if (s.pre_existing) live.insert(s.id), born.insert(s.id);
  }
  auto where = [&](std::size_t e) { return fmt::format("{}: event {}", what, e + 1); };
  for (std::size_t e = 0; e < events.size(); ++e) {
    const event& ev = events[e];
    if (ev.what == event::kind::step) continue;
    if (ev.what == event::kind::free) {
      index_of(ev.id);
      if (live.erase(ev.id) == 0) {
        throw error(fmt::format("{}: free of storage {} that is not live", where(e), ev.id));
      }
      continue;
    }
    if (ev.op >= ops.size()) throw error(fmt::format("{}: op index {} out of range", where(e), ev.op));
    const op_record& op = ops[ev.op];
    if (op.time_ns < 0) throw error(fmt::format("{}: op {} has negative time", where(e), op.name));
    for (const auto* list : {&op.inputs, &op.mutates}) {
      for (storage_id id : *list) {
        index_of(id);
        if (live.count(id) == 0) {
          throw error(fmt::format("{}: op {} reads storage {}, which is not live", where(e), op.name, id));
        }
      }
    }
    for (storage_id id : op.outputs) {
      const storage& s = storages[index_of(id)];
      if (s.pre_existing || !born.insert(id).second) {
        throw error(fmt::format("{}: op {} outputs storage {}, which was allocated before", where(e),
                                op.name, id));
      }
      if (s.bytes == 0) throw error(fmt::format("{}: op {} outputs storage {} of 0 bytes", where(e), op.name, id));
      live.insert(id);
    }
  }
  for (const storage& s : storages) {
    if (!s.pre_existing && born.count(s.id) == 0) {
      throw error(fmt::format("{}: storage {} is declared but no op outputs it", what, s.id));
    }
    if (s.pre_existing && s.bytes == 0) {
      throw error(fmt::format("{}: pre-existing storage {} has 0 bytes", what, s.id));
    }
  }
}

std::int64_t trace::compute_ns() const {
  std::int64_t total = 0;
  for (const event& e : events) {
    if (e.what == event::kind::op) total += ops[e.op].time_ns;
  }
  return total;
}

std::size_t trace::steps() const {
  std::size_t n = 1;
  bool any_before = false;
  for (const event& e : events) {
    if (e.what == event::kind::step) {
      if (any_before) ++n;
      any_before = false;
    } else {
      any_before = true;
    }
  }
  return n;
}

}  // namespace tp::sim
