#include "allocator/caching_allocator.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "core/format_bytes.hpp"

namespace tp {

using detail::block;
using detail::segment;

namespace {
std::int64_t i64(std::size_t x) { return static_cast<std::int64_t>(x); }
}  // namespace

caching_allocator::caching_allocator(device& dev, options opts)
    : device_(dev),
      max_split_size_(opts.max_split_size),
      device_total_(dev.memory().total_bytes),
      budget_(opts.budget) {
  stats_.max_split_size = max_split_size_ == SIZE_MAX ? -1 : i64(max_split_size_);
  stats_.budget = budget_ ? i64(*budget_) : -1;
}

caching_allocator::~caching_allocator() {
  // No other thread may use the allocator now, so waiting needs no unlock.
  for (auto& [stream, queue] : pending_) {
    for (const pending_event& p : queue) {
      try {
        device_.synchronize_event(p.event);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tensorpager: waiting for an event at shutdown failed: %s\n", e.what());
      }
    }
  }
  for (auto& [address, seg] : segments_) {
    for (block* b = seg->first; b != nullptr;) {
      block* next = b->next;
      delete b;
      b = next;
    }
    device_.deallocate(reinterpret_cast<void*>(address), seg->size);
  }
  for (event_id e : all_events_) device_.destroy_event(e);
}

void* caching_allocator::allocate(std::size_t bytes, stream_id stream) {
  if (bytes == 0) return nullptr;
  lock_type lock(mutex_);
  check_stream(stream);
  if (bytes > device_total_) throw_oom(bytes, stream, 0, /*larger_than_device=*/true);
  const std::size_t size = size_policy::block_size(bytes);
  process_events();
  if (block* b = try_allocate_block(size, stream)) return hand_out(b, size, bytes);

  // Slow path: Note [Reclaim].
  ++stats_.num_alloc_retries;
  wait_for_pending_events(lock);
  release_cached_segments();
  if (block* b = try_allocate_block(size, stream)) return hand_out(b, size, bytes);

  std::size_t reclaimed = 0;
  if (reclaimer* r = reclaimer_) {
    // Bytes freed by a reclaim may not make a usable block (scattered through
    // segments still partly in use): ask again while the reclaimer frees
    // something, until a segment empties or the request fits.
    for (int round = 0; round < max_reclaim_rounds; ++round) {
      const std::size_t need = shortfall(size);
      ++stats_.num_reclaims;
      lock.unlock();
      const std::size_t freed = r->reclaim(need, stream);
      lock.lock();
      reclaimed += freed;
      stats_.reclaimed_bytes += i64(freed);
      notify(allocator_event_kind::reclaim, nullptr, need, freed);
      wait_for_pending_events(lock);
      if (block* b = try_allocate_block(size, stream)) return hand_out(b, size, bytes);
      release_cached_segments();
      if (block* b = try_allocate_block(size, stream)) return hand_out(b, size, bytes);
      if (freed == 0) break;
    }
  }
  throw_oom(bytes, stream, reclaimed, /*larger_than_device=*/false);
}

std::size_t caching_allocator::shortfall(std::size_t size) const {
  const std::size_t want = size_policy::min_segment_size(size);
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all().current);
  std::size_t headroom = device_.memory().free_bytes;
  if (budget_) headroom = std::min(headroom, *budget_ > reserved ? *budget_ - reserved : 0);
  // With headroom but no success the device is fragmented: ask for it all.
  return want > headroom ? want - headroom : want;
}

void caching_allocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  lock_type lock(mutex_);
  const auto it = allocated_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == allocated_.end()) {
    throw invalid_argument(fmt::format(
        "tensorpager: deallocate({}): this pointer is not allocated by this allocator (a double "
        "free, or memory from elsewhere); nothing was freed",
        ptr));
  }
  block* b = it->second;
  allocated_.erase(it);
  b->allocated = false;
  stats_.allocation.add(b->pool, -1);
  stats_.allocated_bytes.add(b->pool, -i64(b->size));
  stats_.requested_bytes.add(b->pool, -i64(b->requested));
  if (b->size >= max_split_size_) stats_.oversize_allocations.add(-1);
  b->requested = 0;
  if (b->stream_uses.empty()) {
    free_block(b, allocator_event_kind::free);  // one event for both (Note [Allocator events])
  } else {
    notify(allocator_event_kind::free_requested, b, b->size);
    insert_events(b);
  }
}

void caching_allocator::record_stream(void* ptr, stream_id stream) {
  lock_type lock(mutex_);
  const auto it = allocated_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == allocated_.end()) {
    throw invalid_argument(
        fmt::format("tensorpager: record_stream({}): this pointer is not allocated by this allocator", ptr));
  }
  check_stream(stream);
  block* b = it->second;
  if (stream == b->stream) return;  // ordered on its own stream already
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
}

void caching_allocator::empty_cache() {
  lock_type lock(mutex_);
  wait_for_pending_events(lock);
  release_cached_segments();
}

void caching_allocator::set_budget(std::optional<std::size_t> bytes) {
  lock_type lock(mutex_);
  const auto reserved = [this] { return static_cast<std::size_t>(stats_.reserved_bytes.all().current); };
  if (bytes && reserved() > *bytes) {
    wait_for_pending_events(lock);
    release_cached_segments();
    if (reserved() > *bytes) {
      throw invalid_argument(fmt::format(
          "tensorpager: set_budget({}): {} is still reserved by segments in use ({} allocated); "
          "free tensors first or choose a budget of at least {}. The budget stays {}",
          format_bytes(*bytes), format_bytes(reserved()),
          format_bytes(static_cast<std::size_t>(stats_.allocated_bytes.all().current)),
          format_bytes(reserved()), budget_ ? format_bytes(*budget_) : std::string("unlimited")));
    }
  }
  budget_ = bytes;
  stats_.budget = budget_ ? i64(*budget_) : -1;
  notify(allocator_event_kind::budget_change, nullptr, budget_.value_or(0));
}

std::optional<std::size_t> caching_allocator::budget() const {
  std::lock_guard lock(mutex_);
  return budget_;
}

void caching_allocator::set_reclaimer(reclaimer* r) {
  std::lock_guard lock(mutex_);
  reclaimer_ = r;
}

void caching_allocator::set_trace(allocator_trace* t) {
  std::lock_guard lock(mutex_);
  trace_ = t;
}

void caching_allocator::set_segment_listener(segment_listener* l) {
  std::lock_guard lock(mutex_);
  segment_listener_ = l;
}

std::size_t caching_allocator::allocation_size(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto it = allocated_.find(reinterpret_cast<std::uintptr_t>(ptr));
  return it == allocated_.end() ? 0 : it->second->size;
}

// --- internals; the lock is held unless a comment says otherwise ---------

// Note [Small requests from large blocks]
// PyTorch keeps the pools apart: a small request never takes a large block.
// Under a budget that strands memory: the cache can hold megabytes of free
// large blocks inside segments that are partly in use (so they cannot be
// released), while a 512 KiB request needs a new 2 MiB small segment that the
// budget no longer allows. When no small block and no new small segment can
// be had, a small request is therefore carved from a free large block (split
// by the large pool's rules; it stays a large-pool block, counted there, and
// merges back into its segment when freed). Without a budget this happens
// only when the device itself is full.
block* caching_allocator::try_allocate_block(std::size_t size, stream_id stream) {
  const pool_kind pool = size_policy::pool_for(size);
  if (block* b = take_free_block(pool, size, stream)) return b;
  if (block* b = allocate_segment(pool, size, stream)) return b;
  if (pool == pool_kind::small) return take_free_block(pool_kind::large, size, stream);
  return nullptr;
}

block* caching_allocator::take_free_block(pool_kind pool, std::size_t size, stream_id stream) {
  detail::block_pool& blocks = pool_of(pool);
  block key;
  key.stream = stream;
  key.size = size;
  const auto it = blocks.lower_bound(&key);
  if (it == blocks.end() || (*it)->stream != stream) return nullptr;
  if (!size_policy::may_serve((*it)->size, size, max_split_size_)) return nullptr;
  block* b = *it;
  blocks.erase(it);
  if (b->is_split()) {
    stats_.inactive_split.add(pool, -1);
    stats_.inactive_split_bytes.add(pool, -i64(b->size));
  }
  return b;
}

bool caching_allocator::fits_budget(std::size_t bytes) const {
  if (!budget_) return true;
  const auto reserved = static_cast<std::size_t>(stats_.reserved_bytes.all().current);
  return reserved <= *budget_ && bytes <= *budget_ - reserved;
}

block* caching_allocator::allocate_segment(pool_kind pool, std::size_t size, stream_id stream) {
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
  auto* b = new block;
  b->address = seg->address;
  b->size = seg_size;
  b->stream = stream;
  b->pool = pool;
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
  if (size_policy::should_split(b->pool, b->size, size, max_split_size_)) {
    auto* rest = new block;
    rest->address = b->address + size;
    rest->size = b->size - size;
    rest->stream = b->stream;
    rest->pool = b->pool;
    rest->seg = b->seg;
    rest->prev = b;
    rest->next = b->next;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool_of(rest->pool).insert(rest);
    stats_.inactive_split.add(rest->pool, 1);
    stats_.inactive_split_bytes.add(rest->pool, i64(rest->size));
  }
  b->allocated = true;
  b->requested = requested;
  allocated_.emplace(b->address, b);
  stats_.allocation.add(b->pool, 1);
  stats_.allocated_bytes.add(b->pool, i64(b->size));
  stats_.requested_bytes.add(b->pool, i64(requested));
  stats_.active.add(b->pool, 1);
  stats_.active_bytes.add(b->pool, i64(b->size));
  if (b->size >= max_split_size_) stats_.oversize_allocations.add(1);
  notify(allocator_event_kind::alloc, b, b->size, requested);
  return b->ptr();
}

// Requires: b is neither allocated nor waiting on events, and not in a pool.
// kind: free_completed, or free when deallocate() sent no free_requested.
void caching_allocator::free_block(block* b, allocator_event_kind kind) {
  stats_.active.add(b->pool, -1);
  stats_.active_bytes.add(b->pool, -i64(b->size));
  notify(kind, b, b->size);
  if (b->prev != nullptr && b->prev->is_cached()) merge_into(b, b->prev);
  if (b->next != nullptr && b->next->is_cached()) merge_into(b, b->next);
  if (b->is_split()) {
    stats_.inactive_split.add(b->pool, 1);
    stats_.inactive_split_bytes.add(b->pool, i64(b->size));
  }
  pool_of(b->pool).insert(b);
}

// Requires: neighbour is b's prev or next and is cached (so in its pool).
void caching_allocator::merge_into(block* b, block* neighbour) {
  pool_of(neighbour->pool).erase(neighbour);
  stats_.inactive_split.add(neighbour->pool, -1);
  stats_.inactive_split_bytes.add(neighbour->pool, -i64(neighbour->size));
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

event_id caching_allocator::take_event() {
  if (!free_events_.empty()) {
    const event_id e = free_events_.back();
    free_events_.pop_back();
    return e;
  }
  const event_id e = device_.create_event();
  all_events_.push_back(e);
  return e;
}

void caching_allocator::insert_events(block* b) {
  for (const stream_id s : b->stream_uses) {
    const event_id e = take_event();
    device_.record_event(e, s);
    auto it = std::find_if(pending_.begin(), pending_.end(), [s](const auto& p) { return p.first == s; });
    if (it == pending_.end()) it = pending_.insert(pending_.end(), {s, {}});
    it->second.push_back({e, b});
    ++b->pending_events;
    ++pending_count_;
  }
  b->stream_uses.clear();
}

void caching_allocator::process_events() {
  if (pending_count_ == 0) return;
  for (auto& [stream, queue] : pending_) {
    // Events on one stream complete in the order they were recorded.
    while (!queue.empty() && device_.query_event(queue.front().event)) {
      const pending_event p = queue.front();
      queue.pop_front();
      --pending_count_;
      free_events_.push_back(p.event);
      if (--p.block->pending_events == 0) free_block(p.block, allocator_event_kind::free_completed);
    }
  }
}

// Waits, with the lock released, for every event pending now; see Note [Reclaim].
void caching_allocator::wait_for_pending_events(lock_type& lock) {
  process_events();
  if (pending_count_ == 0) return;
  ++stats_.num_sync_all_streams;
  std::vector<event_id> waits;
  waits.reserve(pending_count_);
  for (const auto& [stream, queue] : pending_) {
    for (const pending_event& p : queue) waits.push_back(p.event);
  }
  // Events are pooled and never destroyed while the allocator lives, so the
  // ids stay valid; one re-recorded meanwhile only makes the wait longer.
  lock.unlock();
  for (event_id e : waits) device_.synchronize_event(e);
  lock.lock();
  process_events();
}

std::size_t caching_allocator::release_cached_segments() {
  std::size_t released = 0;
  for (detail::block_pool* blocks : {&small_blocks_, &large_blocks_}) {
    for (auto it = blocks->begin(); it != blocks->end();) {
      block* b = *it;
      if (b->is_split()) {
        ++it;
        continue;
      }
      it = blocks->erase(it);
      const auto seg_it = segments_.find(b->address);
      const std::size_t size = seg_it->second->size;
      if (segment_listener_ != nullptr) segment_listener_->on_segment_free(b->address, size, b->stream);
      device_.deallocate(b->ptr(), size);
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

void caching_allocator::check_stream(stream_id stream) {
  if (stream == default_stream) return;
  if (std::find(known_streams_.begin(), known_streams_.end(), stream) != known_streams_.end()) return;
  if (!device_.is_stream(stream)) {
    throw invalid_argument(
        fmt::format("tensorpager: stream {:#x} is not a stream of device '{}'; use the default stream "
                    "or one created on this device",
                    to_underlying(stream), device_.name()));
  }
  known_streams_.push_back(stream);
}

}  // namespace tp
