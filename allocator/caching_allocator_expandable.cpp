// caching_allocator: expandable segments (Note [Expandable segments] in
// caching_allocator.hpp). The lock is held throughout.

#include <algorithm>
#include <vector>

#include "allocator/caching_allocator.hpp"

namespace tp {

using detail::block;
using detail::segment;
using size_policy::round_down;
using size_policy::round_up;
using size_policy::whole_granules;

namespace {

std::int64_t i64(std::size_t x) { return static_cast<std::int64_t>(x); }

block* new_block(segment& seg, std::uintptr_t address, std::size_t size, bool mapped) {
  auto* b = new block;
  b->address = address;
  b->size = size;
  b->stream = seg.stream;
  b->pool = seg.pool;
  b->life = seg.life;
  b->seg = &seg;
  b->mapped = mapped;
  return b;
}

// Puts `b` where `old` is in its segment's list (old is unlinked, not freed).
void replace_in_list(block* old, block* b) {
  b->prev = old->prev;
  b->next = old->next;
  if (b->prev != nullptr) b->prev->next = b;
  else b->seg->first = b;
  if (b->next != nullptr) b->next->prev = b;
}

// Links `b` right after `at`.
void link_after(block* at, block* b) {
  b->prev = at;
  b->next = at->next;
  if (at->next != nullptr) at->next->prev = b;
  at->next = b;
}

// The bytes of the whole granules inside b (none for no block): what
// unmapping b, were it free, gives back.
std::size_t interior(const block* b, std::size_t g) {
  return b == nullptr ? 0 : whole_granules(b->address, b->end(), g);
}

}  // namespace

// Note [Plans the budget can pay for]
// The cheapest plan is not always one that can be made to fit. A plan that
// builds on free neighbours spares them when make_room unmaps, and it maps
// all of the unmapped block between them even where the request needs less.
// When such a plan is the only one that builds on free neighbours and its
// cost passes the headroom, with nothing else to unmap, taking it fails the
// request with nothing left to evict, where mapping the request fresh costs
// more but unmapping those neighbours' whole granules pays for it. So a plan
// must be affordable: its cost within the headroom plus the whole granules
// of the free blocks it does not build on (what make_room may unmap for it).
// The cheapest affordable plan wins; only when none is affordable, the
// cheapest of all (its cost sizes the reclaim). Where the cheapest plan is
// affordable, nothing changes: it still waits for make_room when it needs
// unmapping, rather than a dearer plan taking headroom at once.
// Measured: docs/decisions.md, Note [Plans the budget can pay for].
std::optional<caching_allocator::growth_plan> caching_allocator::plan_growth(pool_kind pool, std::size_t size,
                                                                             stream_id stream, lifetime life,
                                                                             std::size_t room) const {
  const std::size_t g = granularity_;
  std::optional<std::size_t> unmappable;  // counted only when some plan needs more than the headroom
  const auto affordable = [&](const growth_plan& p) {
    if (p.cost() <= room) return true;
    if (!unmappable) unmappable = unmappable_bytes();
    const std::size_t spared = interior(p.left, g) + interior(p.right, g);
    return p.cost() - room <= *unmappable - std::min(*unmappable, spared);
  };
  std::optional<growth_plan> best;
  bool best_affordable = false;
  const auto consider = [&](const growth_plan& p) {
    const bool a = affordable(p);
    if (best && a != best_affordable) {
      if (a) best = p, best_affordable = true;
      return;
    }
    if (!best || p.cost() < best->cost() || (p.cost() == best->cost() && p.begin < best->begin)) {
      best = p;
      best_affordable = a;
    }
  };
  for (const auto& [address, owned] : segments_) {
    segment* seg = owned.get();
    if (!seg->expandable || seg->stream != stream || seg->pool != pool || seg->life != life) continue;
    for (block* u : seg->unmapped) {
      block* left = u->prev != nullptr && u->prev->is_cached() ? u->prev : nullptr;
      block* right = u->next != nullptr && u->next->is_cached() ? u->next : nullptr;
      const std::size_t l = left != nullptr ? left->size : 0;
      const std::size_t r = right != nullptr ? right->size : 0;
      if (size > l && size - l <= u->size) {  // left + a prefix of u
        consider({seg, u, left, nullptr, u->address, u->address + round_up(size - l, g)});
      }
      if (right != nullptr && size > r && size - r <= u->size) {  // a suffix of u + right
        consider({seg, u, nullptr, right, u->end() - round_up(size - r, g), u->end()});
      }
      if (left != nullptr && right != nullptr && l + u->size + r >= size) {  // left + u + right
        consider({seg, u, left, right, u->address, u->end()});
      }
      // A free left neighbour too large to build on (an oversize block that
      // may not serve the request: take_free_block passed it over) offers no
      // plan but all of u; map a part of u a granule away from it instead,
      // and from the right one, which map_range would merge otherwise.
      if (left != nullptr && l >= size && (right == nullptr || r >= size)) {
        const std::uintptr_t begin = u->address + g;
        const std::uintptr_t end = begin + round_up(size, g);
        if (end + (right != nullptr ? g : 0) <= u->end()) consider({seg, u, nullptr, nullptr, begin, end});
      }
    }
  }
  return best;
}

block* caching_allocator::grow_expandable(pool_kind pool, std::size_t size, stream_id stream, lifetime life) {
  // The budget's room only: the device is asked for its free memory on the
  // slow path (Note [Giving memory back waits]); here a mapping it has no
  // room for just fails.
  std::optional<growth_plan> plan = plan_growth(pool, size, stream, life, budget_room());
  if (!plan) {
    // No segment of this stream and pool has the address space: reserve one,
    // but only when its first mapping would fit the budget.
    const std::size_t first = round_up(size, granularity_);
    if (!fits_budget(first)) return nullptr;
    const std::size_t bytes = std::max(reservation_size_, first);
    auto seg = std::make_unique<segment>();
    seg->address = reinterpret_cast<std::uintptr_t>(device_.reserve(bytes));
    seg->size = bytes;
    seg->stream = stream;
    seg->pool = pool;
    seg->life = life;
    seg->expandable = true;
    block* u = new_block(*seg, seg->address, bytes, /*mapped=*/false);
    seg->first = u;
    seg->unmapped.insert(u);
    plan = growth_plan{seg.get(), u, nullptr, nullptr, u->address, u->address + first};
    segments_.emplace(seg->address, std::move(seg));
  }
  if (!fits_budget(plan->cost())) return nullptr;
  return map_range(*plan);
}

// Maps the plan's range and merges it with the free neighbours the plan
// builds on. Returns the merged free block (in no pool), or nullptr, changing
// nothing, when the device has no room.
block* caching_allocator::map_range(const growth_plan& plan) {
  block* u = plan.unmapped;
  segment& seg = *plan.seg;
  if (!device_.try_map(reinterpret_cast<void*>(plan.begin), plan.cost())) return nullptr;
  // A mapped range is what a segment is for the listener (its trackers see
  // memory arrive and leave); Note [Expandable segments].
  if (segment_listener_ != nullptr) segment_listener_->on_segment_alloc(plan.begin, plan.cost(), seg.stream);
  // Cached neighbours that the new range touches leave their pool before
  // their neighbour becomes mapped (see pool_insert).
  block* left = plan.begin == u->address && u->prev != nullptr && u->prev->is_cached() ? u->prev : nullptr;
  block* right = plan.end == u->end() && u->next != nullptr && u->next->is_cached() ? u->next : nullptr;
  if (left != nullptr) pool_erase(left);
  if (right != nullptr) pool_erase(right);

  seg.unmapped.erase(u);
  const std::uintptr_t u_end = u->end();
  block* m = new_block(seg, plan.begin, plan.cost(), /*mapped=*/true);
  if (plan.begin > u->address) {  // u keeps the head
    u->size = plan.begin - u->address;
    link_after(u, m);
    seg.unmapped.insert(u);
  } else {
    replace_in_list(u, m);
    delete u;
  }
  if (plan.end < u_end) {
    block* tail = new_block(seg, plan.end, u_end - plan.end, /*mapped=*/false);
    link_after(m, tail);
    seg.unmapped.insert(tail);
  }
  count_mapped_ranges(m, /*mapping=*/true);
  ++stats_.num_device_alloc;
  stats_.reserved_bytes.add(seg.pool, i64(plan.cost()));
  notify(allocator_event_kind::segment_map, m, plan.cost(), seg.address);
  if (left != nullptr) absorb(m, left);
  if (right != nullptr) absorb(m, right);
  return m;
}

// The whole granules of free blocks in expandable segments: what
// unmap_free_granules could give back.
std::size_t caching_allocator::unmappable_bytes() const {
  std::size_t bytes = 0;
  for (const detail::block_pool* blocks : {&large_blocks_, &small_blocks_}) {
    for (const block* b : *blocks) {
      if (b->seg->expandable) bytes += interior(b, granularity_);
    }
  }
  return bytes;
}

// Unmaps whole granules of free blocks of expandable segments, largest
// first, until `want` bytes are unmapped (SIZE_MAX: all of them), sparing the
// blocks `spare` builds on. Returns the bytes unmapped.
std::size_t caching_allocator::unmap_free_granules(std::size_t want, const growth_plan* spare) {
  const std::size_t g = granularity_;
  std::vector<block*> candidates;
  for (const detail::block_pool* blocks : {&large_blocks_, &small_blocks_}) {
    for (block* b : *blocks) {
      if (!b->seg->expandable || interior(b, g) == 0) continue;
      if (spare != nullptr && (b == spare->left || b == spare->right)) continue;
      candidates.push_back(b);
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [g](const block* a, const block* b) { return interior(a, g) > interior(b, g); });
  struct range {
    block* b;
    std::uintptr_t begin, end;
  };
  std::vector<range> ranges;
  std::size_t released = 0;
  for (block* b : candidates) {
    if (released >= want) break;
    const std::uintptr_t begin = round_up(b->address, g);
    const std::uintptr_t end = round_down(b->end(), g);
    // Only as many granules as still wanted, from the high end.
    const std::size_t bytes = want == SIZE_MAX ? end - begin : std::min(end - begin, round_up(want - released, g));
    ranges.push_back({b, end - bytes, end});
    released += bytes;
  }
  // Note [Giving memory back waits]: each stream once, before its ranges.
  std::vector<stream_id> waited;
  for (const range& r : ranges) {
    const stream_id s = r.b->stream;
    if (std::find(waited.begin(), waited.end(), s) != waited.end()) continue;
    std::size_t bytes = 0;
    for (const range& other : ranges) bytes += other.b->stream == s ? other.end - other.begin : 0;
    // A stream destroyed since may still run its work: wait for them all.
    if (device_.is_stream(s)) device_.synchronize(s);
    else device_.synchronize_device();
    waited.push_back(s);
    ++stats_.num_device_syncs;
    notify(allocator_event_kind::device_sync, nullptr, bytes, 0, s);
  }
  for (const range& r : ranges) unmap_interior(r.b, r.begin, r.end);
  return released;
}

// Requires: b is cached (pooled) in an expandable segment; [begin, end) is a
// non-empty granule-aligned range inside it.
void caching_allocator::unmap_interior(block* b, std::uintptr_t begin, std::uintptr_t end) {
  segment& seg = *b->seg;
  pool_erase(b);
  if (segment_listener_ != nullptr) segment_listener_->on_segment_free(begin, end - begin, seg.stream);
  device_.unmap(reinterpret_cast<void*>(begin), end - begin);
  const std::uintptr_t b_end = b->end();
  block* u = new_block(seg, begin, end - begin, /*mapped=*/false);
  block* head = nullptr;
  if (begin > b->address) {
    b->size = begin - b->address;
    link_after(b, u);
    head = b;
  } else {
    replace_in_list(b, u);
    delete b;
  }
  block* tail = nullptr;
  if (end < b_end) {
    tail = new_block(seg, end, b_end - end, /*mapped=*/true);
    link_after(u, tail);
  }
  count_mapped_ranges(u, /*mapping=*/false);
  ++stats_.num_device_free;
  stats_.reserved_bytes.add(seg.pool, -i64(end - begin));
  notify(allocator_event_kind::segment_unmap, u, end - begin, seg.address);
  if (head != nullptr) pool_insert(head);
  if (tail != nullptr) pool_insert(tail);
  merge_unmapped(u);
}

// Merges an unmapped block (in no set) with unmapped neighbours and files it
// in its segment's unmapped set. Returns the merged block.
block* caching_allocator::merge_unmapped(block* u) {
  segment& seg = *u->seg;
  if (u->prev != nullptr && !u->prev->mapped) {
    seg.unmapped.erase(u->prev);
    absorb(u, u->prev);
  }
  if (u->next != nullptr && !u->next->mapped) {
    seg.unmapped.erase(u->next);
    absorb(u, u->next);
  }
  seg.unmapped.insert(u);
  return u;
}

// A segment is one block when nothing in it is mapped or allocated.
void caching_allocator::release_empty_expandable_segments() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    segment& seg = *it->second;
    if (!seg.expandable || seg.first->next != nullptr || seg.first->mapped) {
      ++it;
      continue;
    }
    device_.release(reinterpret_cast<void*>(seg.address), seg.size);
    delete seg.first;
    it = segments_.erase(it);
  }
}

// The destructor's part: unmaps every mapped range, allocated or not, and
// releases the address space. The blocks stay for the caller to delete; the
// caller has waited for the device.
void caching_allocator::destroy_expandable_segment(segment& seg) noexcept {
  for (const block* b = seg.first; b != nullptr;) {
    if (!b->mapped) {
      b = b->next;
      continue;
    }
    const std::uintptr_t begin = b->address;
    while (b != nullptr && b->mapped) b = b->next;
    const std::uintptr_t end = b != nullptr ? b->address : seg.address + seg.size;
    device_.unmap(reinterpret_cast<void*>(begin), end - begin);
  }
  device_.release(reinterpret_cast<void*>(seg.address), seg.size);
}

// `segment` counts mapped ranges (Note [Expandable segments]): b has just
// been mapped or unmapped, before any merge with its neighbours.
void caching_allocator::count_mapped_ranges(const block* b, bool mapping) {
  const int left = b->prev != nullptr && b->prev->mapped ? 1 : 0;
  const int right = b->next != nullptr && b->next->mapped ? 1 : 0;
  stats_.segment.add(b->pool, mapping ? 1 - left - right : left + right - 1);
}

}  // namespace tp
