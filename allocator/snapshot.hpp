#pragma once
// A picture of the allocator's segments and blocks, shaped like the entries of
// torch.cuda.memory._snapshot()["segments"], so the c10 adapter and the
// profiler can hand it to PyTorch's memory_viz unchanged.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/size_policy.hpp"
#include "device/device.hpp"

namespace tp {

/// PyTorch's block states: allocated; freed but guarded by stream events;
/// free and reusable.
enum class block_state : unsigned char { active_allocated, active_pending_free, inactive };

inline constexpr const char* to_string(block_state s) {
  switch (s) {
    case block_state::active_allocated: return "active_allocated";
    case block_state::active_pending_free: return "active_pending_free";
    case block_state::inactive: return "inactive";
  }
  return "inactive";
}

struct block_snapshot {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested_size = 0;
  block_state state = block_state::inactive;
};

struct segment_snapshot {
  std::uintptr_t address = 0;
  std::size_t total_size = 0;
  std::size_t allocated_size = 0;
  std::size_t active_size = 0;
  std::size_t requested_size = 0;
  stream_id stream{};
  pool_kind pool = pool_kind::small;
  lifetime life = lifetime::transient;  // Note [Long-lived placement] in caching_allocator.hpp
  /// One mapped range of an expandable segment (Note [Expandable segments]
  /// in caching_allocator.hpp), as PyTorch's snapshot reports them.
  bool expandable = false;
  std::vector<block_snapshot> blocks;  // by address, covering the segment
};

}  // namespace tp
