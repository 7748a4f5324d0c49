// Inspection of the caching allocator: statistics, snapshots and the figures
// of an out-of-memory report. The allocation paths are in caching_allocator.cpp.

#include <algorithm>
#include <vector>

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
  f.has_reclaimer = reclaimer_ != nullptr;
  if (reclaimer_ != nullptr) f.reclaimer_account = reclaimer_->describe();
  f.larger_than_device = larger_than_device;
  f.expandable_segments = expandable_;
  if (expandable_) {
    const stranded_figures stranded = stranded_locked();
    f.stranded = stranded.in_granules;
    f.stranded_beside_transient = stranded.beside_transient;
    f.stranded_beside_long_lived = stranded.beside_long_lived;
  }
  notify(allocator_event_kind::oom, nullptr, bytes, 0, stream);
  throw out_of_memory(format_oom_message(f));
}

caching_allocator::stranded_figures caching_allocator::stranded_locked() const {
  stranded_figures f;
  std::vector<const block*> beside;
  for (const detail::block_pool* blocks : {&small_blocks_, &large_blocks_}) {
    for (const block* b : *blocks) {
      if (!b->seg->expandable) {
        // Free neighbours merge, so a wholly free plain segment is one block.
        if (b->prev != nullptr || b->next != nullptr) f.in_plain_segments += b->size;
        continue;
      }
      const std::size_t cut = b->size - size_policy::whole_granules(b->address, b->end(), granularity_);
      if (cut == 0) continue;
      f.in_granules += cut;
      for (const block* n : {b->prev, b->next}) {
        if (n != nullptr && n->allocated) beside.push_back(n);
      }
    }
  }
  std::sort(beside.begin(), beside.end());
  beside.erase(std::unique(beside.begin(), beside.end()), beside.end());
  for (const block* n : beside) ++(n->life == lifetime::long_lived ? f.beside_long_lived : f.beside_transient);
  return f;
}

std::size_t caching_allocator::stranded_bytes() const {
  std::lock_guard lock(mutex_);
  const stranded_figures f = stranded_locked();
  return f.in_granules + f.in_plain_segments;
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
    case allocator_event_kind::segment_map: return "segment_map";
    case allocator_event_kind::segment_unmap: return "segment_unmap";
    case allocator_event_kind::device_sync: return "device_sync";
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

runtime_allocator::allocated_marks caching_allocator::take_allocated_high_water() {
  std::lock_guard lock(mutex_);
  const std::int64_t now = stats_.allocated_bytes.all().current;
  const std::int64_t high = std::max(high_water_, now);
  high_water_ = now;
  return {static_cast<std::size_t>(high), static_cast<std::size_t>(now)};
}

std::size_t caching_allocator::largest_free_block() const {
  std::lock_guard lock(mutex_);
  return largest_free_block_locked();
}

// A plain segment is one snapshot segment; an expandable one gives one per
// mapped range (Note [Expandable segments]).
std::vector<segment_snapshot> caching_allocator::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<segment_snapshot> out;
  out.reserve(segments_.size());
  for (const auto& [address, seg] : segments_) {
    for (const block* first = seg->first; first != nullptr;) {
      if (!first->mapped) {
        first = first->next;
        continue;
      }
      const block* end = first;
      std::size_t total = 0;
      for (; end != nullptr && end->mapped; end = end->next) total += end->size;
      out.push_back(snapshot_range(*seg, first, end, total));
      first = end;
    }
  }
  return out;
}

// Requires: [first, end) are the mapped blocks of one range of seg, total bytes.
segment_snapshot caching_allocator::snapshot_range(const detail::segment& seg, const block* first,
                                                   const block* end, std::size_t total) {
  segment_snapshot s;
  s.address = first->address;
  s.total_size = total;
  s.stream = seg.stream;
  s.pool = seg.pool;
  s.life = seg.life;
  s.expandable = seg.expandable;
  for (const block* b = first; b != end; b = b->next) {
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
  return s;
}

}  // namespace tp
