// caching_allocator: the pools of free blocks, splitting and merging, plain
// segments and the budget. The lock is held throughout (callers in
// caching_allocator.cpp take it).

#include <algorithm>
#include <cstdio>

#include "allocator/caching_allocator.hpp"
#include "core/errors.hpp"

namespace tp {

using detail::block;
using detail::segment;

namespace {
std::int64_t i64(std::size_t x) { return static_cast<std::int64_t>(x); }
}  // namespace

// Note [Small requests from large blocks]
// PyTorch keeps the pools apart: a small request never takes a large block.
// Under a budget that can leave a small request with nowhere to go: the
// cache may hold megabytes of free large blocks inside segments that are
// partly in use (so they cannot be released), while a 512 KiB request needs
// a new 2 MiB small segment that the budget no longer allows. So, as the last
// resort before an out-of-memory, a small request is carved from a free large
// block (split by the large pool's rules; it stays a large-pool block,
// counted there, and merges back into its segment when freed): with
// expandable segments the smallest free large block with no whole granule
// inside first (the stranded tail of a granule that a large allocation only
// partly fills, which can never be unmapped), then any.
//
// Last, not first: a small block in a large granule keeps the whole granule
// mapped after its large neighbour is freed, and small requests are often
// the long-lived ones (a transformer's residual stream, held by the program
// through each layer). Taking stranded tails before mapping a small granule
// (until 2026-11-29) let three 512 KiB activations pin three 2 MiB granules
// of a decoder under a budget: a 2 MiB request then faced 8.6 MiB free in
// pieces of at most 1.5 MiB, with nothing left to evict, in 7 runs of 10
// under the default policy. Asked last, the reclaimer evicts first and the
// small pool grows into what it frees (make_room unmaps free granules of
// either pool): 10 runs of 10. Measured: docs/decisions.md, Note [Small
// requests from large blocks].
//
// The other way too, last: a large request that nothing else serves, not
// even after the reclaimer, takes a free block of the small pool that fits
// (it stays a small-pool block, counted there, and merges back when freed).
// With expandable segments the small pool's free blocks coalesce across its
// granules, and under a budget they can hold the only free range a request
// of a granule or more fits in, while no unmap can give it back (small
// blocks in use share its end granules). Issue 33's decoder at 0.5 under
// manage:all died so in about 1 run in 10, in the backward of a late step:
// 2 MiB asked, the largest free block 2.8 to 3.3 MiB, in the small pool.
// Not for try_allocate(): a move into a long-lived block must not land in
// the small pool, which is transient.
block* caching_allocator::take_large_for_small(std::size_t size, stream_id stream, lifetime life) {
  if (size_policy::pool_for(size) != pool_kind::small) return nullptr;
  if (expandable_) {
    if (block* b = take_stranded_block(size, stream, life)) return b;
  }
  return take_free_block(pool_kind::large, size, stream, life);
}

block* caching_allocator::take_small_for_large(std::size_t size, stream_id stream) {
  if (size_policy::pool_for(size) != pool_kind::large) return nullptr;
  return take_free_block(pool_kind::small, size, stream, lifetime::transient);  // small blocks are transient
}

block* caching_allocator::try_allocate_block(std::size_t size, stream_id stream, lifetime life) {
  const pool_kind pool = size_policy::pool_for(size);
  if (block* b = take_free_block(pool, size, stream, life)) return b;
  return grow(pool, size, stream, life);
}

// Note [Long-lived placement]: a free block of the other lifetime, before
// anything is evicted for the request.
block* caching_allocator::borrow_block(std::size_t size, stream_id stream, lifetime life) {
  const lifetime other = life == lifetime::transient ? lifetime::long_lived : lifetime::transient;
  const pool_kind pool = size_policy::pool_for(size);
  if (block* b = take_free_block(pool, size, stream, other)) return b;
  if (pool == pool_kind::small) return take_free_block(pool_kind::large, size, stream, other);
  return nullptr;
}

// Note [Virtual memory that fails]
// A virtual-memory call that fails with anything but out of memory (a driver
// or a sandbox that does not support it, seen possible under gVisor) would
// fail every allocation after it. The allocator says so once and serves the
// rest of its life from plain segments; expandable segments it has already
// keep working as they are (mapped ranges stay, free granules are unmapped).
block* caching_allocator::grow(pool_kind pool, std::size_t size, stream_id stream, lifetime life) {
  if (!expandable_ || vmm_failed_) return allocate_segment(pool, size, stream, life);
  try {
    return grow_expandable(pool, size, stream, life);
  } catch (const cuda_error& e) {
    vmm_failed_ = true;
    std::fprintf(stderr,
                 "tensorpager: expandable segments are off for %s from now on (%s); plain segments serve it\n",
                 device_.name().c_str(), e.what());
    return allocate_segment(pool, size, stream, life);
  }
}

block* caching_allocator::take_free_block(pool_kind pool, std::size_t size, stream_id stream, lifetime life) {
  detail::block_pool& blocks = pool_of(pool);
  block key;
  key.life = life;
  key.stream = stream;
  key.size = size;
  const auto it = blocks.lower_bound(&key);
  if (it == blocks.end() || (*it)->life != life || (*it)->stream != stream) return nullptr;
  if (!size_policy::may_serve((*it)->size, size, max_split_size_)) return nullptr;
  block* b = *it;
  pool_erase(b);
  return b;
}

// Note [Small requests from large blocks]: a stranded tail. Blocks of two
// granules or more always hold a whole one, so the search stops there.
block* caching_allocator::take_stranded_block(std::size_t size, stream_id stream, lifetime life) {
  block key;
  key.life = life;
  key.stream = stream;
  key.size = size;
  for (auto it = large_blocks_.lower_bound(&key); it != large_blocks_.end(); ++it) {
    block* b = *it;
    if (b->life != life || b->stream != stream || b->size >= 2 * granularity_) break;
    if (!b->seg->expandable || size_policy::whole_granules(b->address, b->end(), granularity_) != 0) continue;
    pool_erase(b);
    return b;
  }
  return nullptr;
}

bool caching_allocator::fits_budget(std::size_t bytes) const {
  if (!budget_) return true;
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all().current);
  return reserved <= *budget_ && bytes <= *budget_ - reserved;
}

// What the budget still allows to reserve (SIZE_MAX: no budget).
std::size_t caching_allocator::budget_room() const {
  if (!budget_) return SIZE_MAX;
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all().current);
  return *budget_ > reserved ? *budget_ - reserved : 0;
}

// What the budget and the device allow: asks the device (cudaMemGetInfo), so
// only on the slow path (Note [Giving memory back waits]).
std::size_t caching_allocator::headroom() const {
  return std::min(device_.memory().free_bytes, budget_room());
}

// What the reclaimer is asked for: the bytes the next segment (or, in an
// expandable segment, the planned mapping) needs beyond the headroom.
std::size_t caching_allocator::shortfall(std::size_t size, stream_id stream, lifetime life) const {
  const std::size_t room = headroom();
  std::size_t want = size_policy::min_segment_size(size);
  if (expandable_) {
    const std::optional<growth_plan> plan = plan_growth(size_policy::pool_for(size), size, stream, life, room);
    want = plan ? plan->cost() : size_policy::round_up(size, granularity_);
  }
  // With headroom but no success the device is fragmented: ask for it all.
  return want > room ? want - room : want;
}

block* caching_allocator::allocate_segment(pool_kind pool, std::size_t size, stream_id stream, lifetime life) {
  std::size_t seg_size = size_policy::segment_size(size);
  void* ptr = nullptr;
  if (fits_budget(seg_size)) ptr = device_.try_allocate(seg_size);
  if (ptr == nullptr) {
    seg_size = size_policy::min_segment_size(size);
    if (!fits_budget(seg_size)) return nullptr;
    ptr = device_.try_allocate(seg_size);
    if (ptr == nullptr) return nullptr;
  }
  auto seg = std::make_unique<segment>();
  seg->address = reinterpret_cast<std::uintptr_t>(ptr);
  seg->size = seg_size;
  seg->stream = stream;
  seg->pool = pool;
  seg->life = life;
  auto* b = new block;
  b->address = seg->address;
  b->size = seg_size;
  b->stream = stream;
  b->pool = pool;
  b->life = life;
  b->seg = seg.get();
  seg->first = b;
  segments_.emplace(seg->address, std::move(seg));
  ++stats_.num_device_alloc;
  stats_.segment.add(pool, 1);
  stats_.reserved_bytes.add(pool, i64(seg_size));
  if (seg_size >= max_split_size_) stats_.oversize_segments.add(1);
  notify(allocator_event_kind::segment_alloc, b, seg_size);
  if (segment_listener_ != nullptr) segment_listener_->on_segment_alloc(b->address, seg_size, stream);
  return b;
}

void* caching_allocator::hand_out(block* b, std::size_t size, std::size_t requested) {
  if (size_policy::should_split(b->pool, b->size, size, max_split_size_, b->seg->expandable)) {
    const std::size_t offset = carve_offset(*b, size);  // Note [Granule-aware carving]
    if (offset > 0) pool_insert(split_front(b, offset));
    if (b->size > size) pool_insert(split_back(b, size));
  }
  b->allocated = true;
  b->requested = requested;
  allocated_.emplace(b->address, b);
  stats_.allocation.add(b->pool, 1);
  stats_.allocated_bytes.add(b->pool, i64(b->size));
  high_water_ = std::max(high_water_, stats_.allocated_bytes.all().current);
  stats_.requested_bytes.add(b->pool, i64(requested));
  stats_.active.add(b->pool, 1);
  stats_.active_bytes.add(b->pool, i64(b->size));
  if (b->size >= max_split_size_) stats_.oversize_allocations.add(1);
  notify(allocator_event_kind::alloc, b, b->size, requested);
  return b->ptr();
}

// Note [Granule-aware carving]
// In an expandable segment, what stays of a split free block can be unmapped
// only in whole granules: the partial granules at its two ends stay mapped
// and count against the budget (Note [Expandable segments]). Carving the
// request from the front of the free block leaves the remainder starting
// where the request ends, often mid-granule; carving it from the end leaves
// it starting where the free block did. The allocator takes the place that
// leaves the remainder more whole granules, the front on a tie (as plain
// segments always carve), with one exception. A request of whole granules
// can sit on granule boundaries, filling exactly the granules it touches;
// it goes on the first boundary that leaves as many whole granules free,
// even off both ends of the free block (which then splits in three). Carved
// from the front at 1 MiB past a boundary, a 50 MiB gradient touches 26
// granules, and keeps the 26th mapped for its lifetime after the neighbours
// that shared the ends have gone. A request of another size strands part of
// a granule wherever it goes: on a boundary, that part only moves to its
// other end, away from the neighbour whose granule it would have filled, and
// it measured worse in tp-sim (bench/results/sim_lending.md).
std::size_t caching_allocator::carve_offset(const block& b, std::size_t size) const {
  if (!b.seg->expandable) return 0;
  using size_policy::align_down;
  using size_policy::align_up;
  using size_policy::whole_granules;
  const std::size_t g = granularity_;  // a power of two, checked at construction
  const std::uintptr_t lo = b.address;
  const std::uintptr_t last = b.end() - size;  // the highest start
  // In order of preference: a later place must leave more whole granules.
  std::uintptr_t places[4];
  std::size_t n = 0;
  if (align_down(size, g) == size) {
    places[n++] = align_up(lo, g);
    places[n++] = align_down(last, g);
  }
  places[n++] = lo;
  places[n++] = last;
  std::uintptr_t best = lo;
  std::size_t best_free = 0;
  bool found = false;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uintptr_t p = places[i];
    if (p < lo || p > last) continue;
    const std::size_t free = whole_granules(lo, p, g) + whole_granules(p + size, b.end(), g);
    if (!found || free > best_free) {
      best = p;
      best_free = free;
      found = true;
    }
  }
  return best - lo;
}

// Splits the first `bytes` of b off into a new free block before it (in no
// pool), which it returns; b keeps the rest. Requires: 0 < bytes < b->size.
block* caching_allocator::split_front(block* b, std::size_t bytes) {
  block* rest = split_off(*b, b->address, bytes);
  rest->prev = b->prev;
  rest->next = b;
  if (b->prev != nullptr) b->prev->next = rest;
  else b->seg->first = rest;
  b->prev = rest;
  b->address += bytes;
  b->size -= bytes;
  return rest;
}

// Splits what b holds past its first `size` bytes off into a new free block
// after it (in no pool), which it returns. Requires: 0 < size < b->size.
block* caching_allocator::split_back(block* b, std::size_t size) {
  block* rest = split_off(*b, b->address + size, b->size - size);
  rest->prev = b;
  rest->next = b->next;
  if (b->next != nullptr) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  return rest;
}

// A free block of b's segment, stream and pool at [address, address + size),
// not yet linked.
block* caching_allocator::split_off(const block& b, std::uintptr_t address, std::size_t size) {
  auto* rest = new block;
  rest->address = address;
  rest->size = size;
  rest->stream = b.stream;
  rest->pool = b.pool;
  rest->life = b.life;
  rest->seg = b.seg;
  return rest;
}

// Requires: b is neither allocated nor waiting on events, and not in a pool.
// kind: free_completed, or free when deallocate() sent no free_requested.
void caching_allocator::free_block(block* b, allocator_event_kind kind) {
  stats_.active.add(b->pool, -1);
  stats_.active_bytes.add(b->pool, -i64(b->size));
  notify(kind, b, b->size);
  cache_block(b);
}

// Merges a free mapped block with its cached neighbours and puts the result
// in its pool. Requires: b is mapped, free, not waiting, not in a pool.
void caching_allocator::cache_block(block* b) {
  if (b->prev != nullptr && b->prev->is_cached()) merge_into(b, b->prev);
  if (b->next != nullptr && b->next->is_cached()) merge_into(b, b->next);
  pool_insert(b);
}

// Requires: neighbour is b's prev or next and is cached (so in its pool).
void caching_allocator::merge_into(block* b, block* neighbour) {
  pool_erase(neighbour);
  absorb(b, neighbour);
}

// Requires: neighbour is b's prev or next, in no pool or set.
void caching_allocator::absorb(block* b, block* neighbour) {
  if (neighbour == b->prev) {
    b->address = neighbour->address;
    b->prev = neighbour->prev;
    if (b->prev != nullptr) b->prev->next = b;
    else b->seg->first = b;
  } else {
    b->next = neighbour->next;
    if (b->next != nullptr) b->next->prev = b;
  }
  b->size += neighbour->size;
  delete neighbour;
}

// A block enters or leaves its pool; inactive_split counts the pooled
// blocks that share a mapped range with others (block::is_split()). A pooled
// block's neighbours stay mapped while it is pooled (it is taken out before
// a neighbour is mapped next to it: map_range), so both see the same answer.
void caching_allocator::pool_insert(block* b) {
  pool_of(b->pool).insert(b);
  if (b->is_split()) {
    stats_.inactive_split.add(b->pool, 1);
    stats_.inactive_split_bytes.add(b->pool, i64(b->size));
  }
}

void caching_allocator::pool_erase(block* b) {
  pool_of(b->pool).erase(b);
  if (b->is_split()) {
    stats_.inactive_split.add(b->pool, -1);
    stats_.inactive_split_bytes.add(b->pool, -i64(b->size));
  }
}

// Returns every plain segment that is wholly free to the device.
std::size_t caching_allocator::release_cached_segments() {
  std::size_t released = 0;
  for (detail::block_pool* blocks : {&small_blocks_, &large_blocks_}) {
    for (auto it = blocks->begin(); it != blocks->end();) {
      block* b = *it;
      if (b->is_split() || b->seg->expandable) {
        ++it;
        continue;
      }
      it = blocks->erase(it);
      const auto seg_it = segments_.find(b->address);
      const std::size_t size = seg_it->second->size;
      if (segment_listener_ != nullptr) segment_listener_->on_segment_free(b->address, size, b->stream);
      device_.deallocate(b->ptr(), size);  // waits for the whole device: Note [Giving memory back waits]
      ++stats_.num_device_syncs;
      notify(allocator_event_kind::device_sync, b, size, 1);
      ++stats_.num_device_free;
      stats_.segment.add(b->pool, -1);
      stats_.reserved_bytes.add(b->pool, -i64(size));
      if (size >= max_split_size_) stats_.oversize_segments.add(-1);
      notify(allocator_event_kind::segment_free, b, size);
      released += size;
      segments_.erase(seg_it);
      delete b;
    }
  }
  return released;
}

// Note [Expandable segments], "Less than a granule": with expandable
// segments, a request the budget has room for, but not for the granules it
// would map, gets a plain segment of just its size.
block* caching_allocator::allocate_plain_fallback(std::size_t size, stream_id stream, lifetime life) {
  if (!expandable_) return nullptr;
  return allocate_segment(size_policy::pool_for(size), size, stream, life);
}

// Note [Reclaim]: frees what the cache holds so that the request can grow
// its segment (or get a new one) within the budget.
void caching_allocator::make_room(std::size_t size, stream_id stream, lifetime life) {
  release_cached_segments();
  if (!expandable_) return;
  // Note [Plans the budget can pay for] in caching_allocator_expandable.cpp.
  const std::size_t room = headroom();
  const std::optional<growth_plan> plan = plan_growth(size_policy::pool_for(size), size, stream, life, room);
  const std::size_t cost = plan ? plan->cost() : size_policy::round_up(size, granularity_);
  if (cost > room) unmap_free_granules(cost - room, plan ? &*plan : nullptr);
}

}  // namespace tp
