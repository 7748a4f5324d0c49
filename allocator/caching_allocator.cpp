// caching_allocator: construction, the public calls and the slow path of
// Note [Reclaim]. The pools and plain segments are in
// caching_allocator_blocks.cpp, stream-ordered frees in
// caching_allocator_events.cpp, expandable segments in
// caching_allocator_expandable.cpp, statistics and snapshots in
// caching_allocator_inspection.cpp.

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

// Note [Expandable segments]: 9/8 of the device, as PyTorch reserves, so that
// unmapping early granules to map late ones rarely runs out of address space;
// capped (above any GPU's memory) so that the simulator's device of
// terabytes does not reserve terabytes per segment.
constexpr std::size_t max_reservation = std::size_t{256} << 30;

std::size_t reservation_for(std::size_t device_total, std::size_t granularity) {
  if (granularity == 0) return 0;
  const std::size_t want = std::min(device_total + device_total / 8, max_reservation);
  return std::max(granularity, size_policy::round_up(want, granularity));
}

}  // namespace

caching_allocator::caching_allocator(device& dev, options opts)
    : device_(dev),
      max_split_size_(opts.max_split_size),
      device_total_(dev.memory().total_bytes),
      expandable_(opts.expandable_segments),
      granularity_(opts.expandable_segments ? dev.granularity() : 0),
      reservation_size_(reservation_for(device_total_, granularity_)),
      budget_(opts.budget) {
  stats_.max_split_size = max_split_size_ == SIZE_MAX ? -1 : i64(max_split_size_);
  stats_.budget = budget_ ? i64(*budget_) : -1;
  if (expandable_ && !size_policy::is_power_of_two(granularity_)) {
    throw invalid_argument(fmt::format(
        "caching_allocator: expandable segments need a device granularity that is a power of two; device '{}' "
        "has {} bytes (use expandable_segments:False with it)",
        dev.name(), granularity_));
  }
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
  // Note [Giving memory back waits]: at shutdown, once, for the whole device.
  const bool any_expandable =
      std::any_of(segments_.begin(), segments_.end(), [](const auto& s) { return s.second->expandable; });
  if (any_expandable) {
    try {
      device_.synchronize_device();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tensorpager: waiting for the device before unmapping at shutdown failed: %s\n", e.what());
    }
  }
  for (auto& [address, seg] : segments_) {
    if (seg->expandable) destroy_expandable_segment(*seg);
    else device_.deallocate(reinterpret_cast<void*>(address), seg->size);
    for (block* b = seg->first; b != nullptr;) {
      block* next = b->next;
      delete b;
      b = next;
    }
  }
  // The events waited for above are destroyed by events_, after this body.
}

void* caching_allocator::allocate(std::size_t bytes, stream_id stream, lifetime life) {
  return allocate(bytes, stream, life, /*may_reclaim=*/true);
}

void* caching_allocator::try_allocate(std::size_t bytes, stream_id stream, lifetime life) {
  return allocate(bytes, stream, life, /*may_reclaim=*/false);
}

void* caching_allocator::allocate(std::size_t bytes, stream_id stream, lifetime life, bool may_reclaim) {
  if (bytes == 0) return nullptr;
  lock_type lock(mutex_);
  check_stream(stream);
  if (bytes > device_total_) throw_oom(bytes, stream, 0, /*larger_than_device=*/true);
  const std::size_t size = size_policy::block_size(bytes);
  life = size_policy::placed_as(size, life);
  process_events();
  if (block* b = try_allocate_block(size, stream, life)) return hand_out(b, size, bytes);

  // Slow path: Note [Reclaim].
  ++stats_.num_alloc_retries;
  wait_for_pending_events(lock);
  make_room(size, stream, life);
  if (block* b = try_allocate_block(size, stream, life)) return hand_out(b, size, bytes);
  if (block* b = allocate_plain_fallback(size, stream, life)) return hand_out(b, size, bytes);
  if (!may_reclaim) {
    block* b = take_large_for_small(size, stream, life);
    return b != nullptr ? hand_out(b, size, bytes) : nullptr;
  }
  if (block* b = borrow_block(size, stream, life)) return hand_out(b, size, bytes);  // Note [Long-lived placement]

  std::size_t reclaimed = 0;
  if (reclaimer* r = reclaimer_) {
    // Bytes freed by a reclaim may not make a usable block (scattered through
    // segments still partly in use): ask again while the reclaimer frees
    // something, until a segment empties or the request fits.
    for (int round = 0; round < max_reclaim_rounds; ++round) {
      const std::size_t need = shortfall(size, stream, life);
      ++stats_.num_reclaims;
      lock.unlock();
      const std::size_t freed = r->reclaim(need, stream);
      lock.lock();
      reclaimed += freed;
      stats_.reclaimed_bytes += i64(freed);
      notify(allocator_event_kind::reclaim, nullptr, need, freed);
      wait_for_pending_events(lock);
      if (block* b = try_allocate_block(size, stream, life)) return hand_out(b, size, bytes);
      make_room(size, stream, life);
      if (block* b = try_allocate_block(size, stream, life)) return hand_out(b, size, bytes);
      if (block* b = allocate_plain_fallback(size, stream, life)) return hand_out(b, size, bytes);
      if (freed == 0) break;
    }
  }
  if (block* b = take_large_for_small(size, stream, life)) return hand_out(b, size, bytes);
  if (block* b = take_small_for_large(size, stream)) return hand_out(b, size, bytes);
  throw_oom(bytes, stream, reclaimed, /*larger_than_device=*/false);
}

void caching_allocator::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  lock_type lock(mutex_);
  const auto it = allocated_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == allocated_.end()) {
    fail_fast(fmt::format("tensorpager: deallocate({}): this pointer is not allocated by this allocator (a double "
                          "free, or memory from elsewhere)",
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
  if (expandable_) {
    unmap_free_granules(SIZE_MAX, nullptr);
    release_empty_expandable_segments();
  }
}

void caching_allocator::set_budget(std::optional<std::size_t> bytes) {
  lock_type lock(mutex_);
  const auto reserved = [this] { return static_cast<std::size_t>(stats_.reserved_bytes.all().current); };
  if (bytes && reserved() > *bytes) {
    wait_for_pending_events(lock);
    release_cached_segments();
    if (expandable_ && reserved() > *bytes) unmap_free_granules(reserved() - *bytes, nullptr);
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

void caching_allocator::set_log(allocator_log* t) {
  std::lock_guard lock(mutex_);
  log_ = t;
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

std::optional<lifetime> caching_allocator::lifetime_of(const void* ptr) const {
  std::lock_guard lock(mutex_);
  const auto it = allocated_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == allocated_.end()) return std::nullopt;
  return it->second->life;
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
