// Inspection of the caching allocator: statistics, snapshots and the figures
// of an out-of-memory report. The allocation paths are in caching_allocator.cpp.

#include <algorithm>

#include "allocator/caching_allocator.hpp"
#include "allocator/oom_report.hpp"
#include "core/errors.hpp"

namespace tp {

using detail::block;

std::size_t caching_allocator::largest_free_block_locked() const {
  std::size_t largest = 0;
  for (const detail::block_pool* blocks : {&small_blocks_, &large_blocks_}) {
    for (const block* b : *blocks) largest = std::max(largest, b->size);
  }
  return largest;
}

void caching_allocator::throw_oom(std::size_t bytes, stream_id stream, std::size_t reclaimed,
                                  bool larger_than_device) {
  ++stats_.num_ooms;
  oom_figures f;
  f.requested = bytes;
  f.stream = stream;
  f.budget = budget_;
  f.allocated = static_cast<std::size_t>(stats_.allocated_bytes.all().current);
  f.reserved = static_cast<std::size_t>(stats_.reserved_bytes.all().current);
  f.largest_free_block = largest_free_block_locked();
  f.device = device_.memory();
  f.device_name = device_.name();
  f.reclaimed = reclaimed;
  if (reclaimer_ != nullptr) f.reclaimer_account = reclaimer_->describe();
  f.larger_than_device = larger_than_device;
  notify(allocator_event_kind::oom, nullptr, bytes, 0, stream);
  throw out_of_memory(format_oom_message(f));
}

const char* to_string(allocator_event_kind k) {
  switch (k) {
    case allocator_event_kind::alloc: return "alloc";
    case allocator_event_kind::free_requested: return "free_requested";
    case allocator_event_kind::free_completed: return "free_completed";
    case allocator_event_kind::segment_alloc: return "segment_alloc";
    case allocator_event_kind::segment_free: return "segment_free";
    case allocator_event_kind::oom: return "oom";
    case allocator_event_kind::budget_change: return "budget_change";
    case allocator_event_kind::reclaim: return "reclaim";
    case allocator_event_kind::free: return "free";
  }
  return "unknown";
}

// --- inspection ------------------------------------------------------------

allocator_stats caching_allocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void caching_allocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.reset_peak();
}

void caching_allocator::reset_accumulated_stats() {
  std::lock_guard lock(mutex_);
  stats_.reset_accumulated();
}

std::size_t caching_allocator::largest_free_block() const {
  std::lock_guard lock(mutex_);
  return largest_free_block_locked();
}

std::vector<segment_snapshot> caching_allocator::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<segment_snapshot> out;
  out.reserve(segments_.size());
  for (const auto& [address, seg] : segments_) {
    segment_snapshot s;
    s.address = address;
    s.total_size = seg->size;
    s.stream = seg->stream;
    s.pool = seg->pool;
    for (const block* b = seg->first; b != nullptr; b = b->next) {
      block_snapshot bs;
      bs.address = b->address;
      bs.size = b->size;
      bs.requested_size = b->requested;
      bs.state = b->allocated            ? block_state::active_allocated
                 : b->pending_events > 0 ? block_state::active_pending_free
                                         : block_state::inactive;
      if (b->allocated) {
        s.allocated_size += b->size;
        s.requested_size += b->requested;
      }
      if (bs.state != block_state::inactive) s.active_size += b->size;
      s.blocks.push_back(bs);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tp
