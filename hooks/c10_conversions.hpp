#pragma once
// tensorpager's statistics and snapshots in c10's types, as PyTorch's own
// allocator reports them (torch.cuda.memory_stats(), torch.cuda.memory._snapshot()).
// Pure functions; they need c10's CPU headers only, so the CPU build tests them.

#include <c10/core/CachingDeviceAllocator.h>

#include "allocator/memory_stats.hpp"
#include "allocator/snapshot.hpp"

namespace tp::hooks {

/// The DeviceStats PyTorch's caching allocator would report for the same
/// figures. Pools map all/small/large to AGGREGATE/SMALL_POOL/LARGE_POOL;
/// max_split_size is -1 when unlimited, as PyTorch reports its default.
c10::CachingDeviceAllocator::DeviceStats to_device_stats(const allocator_stats& s);

/// One segment as c10's SegmentInfo on `device`. Blocks carry sizes, not
/// addresses: PyTorch derives each block's address from the segment's and the
/// sizes before it, so the blocks must cover the segment in address order
/// (segment_snapshot guarantees it).
c10::CachingDeviceAllocator::SegmentInfo to_segment_info(const segment_snapshot& seg,
                                                         c10::DeviceIndex device);

}  // namespace tp::hooks
