#pragma once
// Allocator statistics with the names and meanings of torch.cuda.memory_stats(),
// so tools written for PyTorch read tensorpager's figures unchanged.

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "allocator/size_policy.hpp"

namespace tp {

/// One statistic: its current value, its peak since the last reset, and the
/// running totals of increases ("allocated") and decreases ("freed").
struct stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;

  void add(std::int64_t delta) {
    current += delta;
    if (current > peak) peak = current;
    if (delta > 0) allocated += delta;
    else freed -= delta;
  }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
};

/// A statistic kept for all blocks and for each pool ("all", "small_pool",
/// "large_pool" in PyTorch's key names).
struct pooled_stat {
  std::array<stat, 3> by;  // [0] all, [1] small_pool, [2] large_pool

  void add(pool_kind pool, std::int64_t delta) {
    by[0].add(delta);
    by[pool == pool_kind::small ? 1 : 2].add(delta);
  }
  const stat& all() const { return by[0]; }
  const stat& of(pool_kind pool) const { return by[pool == pool_kind::small ? 1 : 2]; }
};

/// Everything the caching allocator counts. A plain value: copy it out under
/// the allocator's lock, read it anywhere. Meanings follow PyTorch:
/// allocation/segment/active/inactive_split count blocks; the *_bytes ones
/// count bytes; "active" blocks are allocated or freed but waiting on stream
/// events; "inactive_split" blocks are free parts of split segments.
struct allocator_stats {
  pooled_stat allocation;
  pooled_stat segment;
  pooled_stat active;
  pooled_stat inactive_split;
  pooled_stat allocated_bytes;
  pooled_stat reserved_bytes;
  pooled_stat active_bytes;
  pooled_stat inactive_split_bytes;
  pooled_stat requested_bytes;
  stat oversize_allocations;
  stat oversize_segments;
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_sync_all_streams = 0;
  std::int64_t num_device_alloc = 0;
  std::int64_t num_device_free = 0;
  std::int64_t num_reclaims = 0;        // tensorpager's: calls to the reclaimer
  std::int64_t reclaimed_bytes = 0;     // tensorpager's: bytes it reported freed
  /// tensorpager's: host waits on the device that giving memory back took
  /// (Note [Giving memory back waits] in caching_allocator.hpp).
  std::int64_t num_device_syncs = 0;
  std::int64_t max_split_size = 0;
  std::int64_t budget = -1;             // tensorpager's: -1 when there is none

  void reset_peak();
  void reset_accumulated();
};

/// The statistics flattened to torch.cuda.memory_stats()' keys, e.g.
/// "allocated_bytes.all.current", "reserved_bytes.large_pool.peak",
/// "num_alloc_retries". Keys tensorpager adds start with "tensorpager.".
std::map<std::string, std::int64_t> to_memory_stats(const allocator_stats& s);

}  // namespace tp
