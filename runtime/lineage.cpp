#include "runtime/lineage.hpp"

#include <algorithm>

namespace tp {

std::uint32_t lineage::index(tensor_id id) const {
  const auto it = index_.find(to_underlying(id));
  return it == index_.end() ? none : it->second;
}

std::uint32_t lineage::find(std::uint32_t c) {
  std::uint32_t root = c;
  while (classes_[root].parent != root) root = classes_[root].parent;
  while (classes_[c].parent != root) {
    const std::uint32_t next = classes_[c].parent;
    classes_[c].parent = root;
    c = next;
  }
  return root;
}

void lineage::add(tensor_id id, std::int64_t cost_ns, std::span<const tensor_id> parents,
                  std::optional<tensor_id> revive) {
  if (revive) {
    const std::uint32_t n = index(*revive);
    if (n != none) {
      index_.erase(to_underlying(*revive));
      index_[to_underlying(id)] = n;
      node& x = nodes_[n];
      x.id = to_underlying(id);
      x.ghost = false;
      if (x.cls != none) restored(id);
      x.cost_ns = cost_ns;
      return;
    }
  }
  const auto n = static_cast<std::uint32_t>(nodes_.size());
  node x;
  x.id = to_underlying(id);
  x.cost_ns = cost_ns;
  for (tensor_id p : parents) {
    const std::uint32_t pi = index(p);
    if (pi == none || std::find(x.parents.begin(), x.parents.end(), pi) != x.parents.end()) continue;
    x.parents.push_back(pi);
    nodes_[pi].children.push_back(n);
  }
  nodes_.push_back(std::move(x));
  index_[to_underlying(id)] = n;
}

void lineage::set_cost(tensor_id id, std::int64_t cost_ns) {
  const std::uint32_t n = index(id);
  if (n != none) nodes_[n].cost_ns = cost_ns;
}

void lineage::evict_node(std::uint32_t n) {
  node& x = nodes_[n];
  if (x.cls != none) return;
  x.cls = static_cast<std::uint32_t>(classes_.size());
  x.class_share = x.cost_ns;
  classes_.push_back({x.cls, x.cost_ns});
  for (const auto* list : {&x.parents, &x.children}) {
    for (std::uint32_t m : *list) {
      if (nodes_[m].cls == none) continue;
      const std::uint32_t a = find(nodes_[m].cls);
      const std::uint32_t b = find(x.cls);
      if (a == b) continue;
      classes_[a].parent = b;
      classes_[b].value_ns += classes_[a].value_ns;
    }
  }
}

void lineage::evicted(tensor_id id) {
  const std::uint32_t n = index(id);
  if (n != none) evict_node(n);
}

void lineage::restored(tensor_id id) {
  const std::uint32_t n = index(id);
  if (n == none || nodes_[n].cls == none) return;
  node& x = nodes_[n];
  classes_[find(x.cls)].value_ns -= x.class_share;
  x.cls = none;
  x.class_share = 0;
}

void lineage::untracked(tensor_id id) {
  const std::uint32_t n = index(id);
  if (n == none) return;
  evict_node(n);
  nodes_[n].ghost = true;
}

std::int64_t lineage::neighbourhood_cost(tensor_id id) {
  const std::uint32_t n = index(id);
  if (n == none) return 0;
  std::int64_t sum = 0;
  seen_.clear();
  const node& x = nodes_[n];
  for (const auto* list : {&x.parents, &x.children}) {
    for (std::uint32_t m : *list) {
      if (nodes_[m].cls == none) continue;
      const std::uint32_t root = find(nodes_[m].cls);
      if (std::find(seen_.begin(), seen_.end(), root) != seen_.end()) continue;
      seen_.push_back(root);
      sum += classes_[root].value_ns;
    }
  }
  return sum;
}

std::int64_t lineage::evicted_parents_cost(tensor_id id) const {
  const std::uint32_t n = index(id);
  if (n == none) return 0;
  std::int64_t sum = 0;
  for (std::uint32_t p : nodes_[n].parents) {
    if (nodes_[p].cls != none) sum += nodes_[p].cost_ns;
  }
  return sum;
}

void lineage::prune() {
  std::vector<std::uint32_t> remap(nodes_.size(), none);
  std::vector<node> kept;
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].ghost) continue;
    remap[i] = static_cast<std::uint32_t>(kept.size());
    kept.push_back(std::move(nodes_[i]));
  }
  std::vector<bool> was_evicted(kept.size());
  index_.clear();
  for (std::uint32_t i = 0; i < kept.size(); ++i) {
    node& x = kept[i];
    for (auto* list : {&x.parents, &x.children}) {
      std::vector<std::uint32_t> out;
      for (std::uint32_t m : *list) {
        if (remap[m] != none) out.push_back(remap[m]);
      }
      *list = std::move(out);
    }
    was_evicted[i] = x.cls != none;
    x.cls = none;
    x.class_share = 0;
    index_[x.id] = i;
  }
  nodes_ = std::move(kept);
  classes_.clear();
  for (std::uint32_t i = 0; i < nodes_.size(); ++i) {
    if (was_evicted[i]) evict_node(i);
  }
}

}  // namespace tp
