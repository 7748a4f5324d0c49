#include "hooks/c10_conversions.hpp"

#include <utility>

namespace tp::hooks {
namespace {

c10::CachingAllocator::Stat to_c10(const stat& s) {
  c10::CachingAllocator::Stat out;
  out.current = s.current;
  out.peak = s.peak;
  out.allocated = s.allocated;
  out.freed = s.freed;
  return out;
}

c10::CachingAllocator::StatArray to_c10(const pooled_stat& p) {
  using c10::CachingAllocator::StatType;
  c10::CachingAllocator::StatArray out;
  out[static_cast<std::size_t>(StatType::AGGREGATE)] = to_c10(p.all());
  out[static_cast<std::size_t>(StatType::SMALL_POOL)] = to_c10(p.of(pool_kind::small));
  out[static_cast<std::size_t>(StatType::LARGE_POOL)] = to_c10(p.of(pool_kind::large));
  return out;
}

}  // namespace

c10::CachingDeviceAllocator::DeviceStats to_device_stats(const allocator_stats& s) {
  c10::CachingDeviceAllocator::DeviceStats out;
  out.allocation = to_c10(s.allocation);
  out.segment = to_c10(s.segment);
  out.active = to_c10(s.active);
  out.inactive_split = to_c10(s.inactive_split);
  out.allocated_bytes = to_c10(s.allocated_bytes);
  out.reserved_bytes = to_c10(s.reserved_bytes);
  out.active_bytes = to_c10(s.active_bytes);
  out.inactive_split_bytes = to_c10(s.inactive_split_bytes);
  out.requested_bytes = to_c10(s.requested_bytes);
  out.num_alloc_retries = s.num_alloc_retries;
  out.num_ooms = s.num_ooms;
  out.oversize_allocations = to_c10(s.oversize_allocations);
  out.oversize_segments = to_c10(s.oversize_segments);
  out.num_sync_all_streams = s.num_sync_all_streams;
  out.num_device_alloc = s.num_device_alloc;
  out.num_device_free = s.num_device_free;
  // Both report "unlimited" as -1 (PyTorch casts its SIZE_MAX default to int64).
  out.max_split_size = s.max_split_size;
  return out;
}

c10::CachingDeviceAllocator::SegmentInfo to_segment_info(const segment_snapshot& seg,
                                                         c10::DeviceIndex device) {
  c10::CachingDeviceAllocator::SegmentInfo out;
  out.device = device;
  out.address = seg.address;
  out.total_size = seg.total_size;
  out.requested_size = seg.requested_size;
  out.allocated_size = seg.allocated_size;
  out.active_size = seg.active_size;
  out.stream = reinterpret_cast<void*>(to_underlying(seg.stream));
  out.is_large = seg.pool == pool_kind::large;
  out.is_expandable = seg.expandable;
  out.blocks.reserve(seg.blocks.size());
  for (const block_snapshot& b : seg.blocks) {
    c10::CachingDeviceAllocator::BlockInfo info;
    info.size = b.size;
    info.requested_size = b.requested_size;
    info.allocated = b.state == block_state::active_allocated;
    info.active = b.state != block_state::inactive;
    out.blocks.push_back(std::move(info));
  }
  return out;
}

}  // namespace tp::hooks
