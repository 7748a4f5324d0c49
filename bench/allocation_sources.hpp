#pragma once
// The two allocators tp_allocator_bench compares, behind one duck-typed
// Source shape (allocate(bytes) -> void*, deallocate(ptr, bytes)) so that
// every workload is written once and replays the same calls through both.
//
// Note [Upstream baseline]
// "Upstream" is simulated_device::try_allocate/deallocate: aligned_alloc plus
// a std::map insert under a mutex. That is orders of magnitude cheaper than
// cudaMalloc/cudaFree (microseconds to milliseconds, and cudaFree synchronizes
// the device), so the cached/upstream ratios here understate what the cache
// saves on a GPU.
// glibc's malloc adapts: a free of an mmap-served block raises the mmap
// threshold (up to 32 MiB) and the trim threshold with it, so how much the
// upstream costs for 128 KiB .. 32 MiB depended on which case had run before
// (1 MiB pairs: ~100 ns in one pass, ~350 ns in the next, same process).
// pin_malloc_thresholds() fixes both at the values glibc itself converges
// to, 32 MiB and 64 MiB: below 32 MiB the upstream is heap memory, as cheap
// as glibc gets; 256 MiB and 1 GiB pay mmap+munmap every time.

#include <cstddef>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "allocator/caching_allocator.hpp"
#include "core/clock.hpp"
#include "core/errors.hpp"
#include "device/simulated_device.hpp"

namespace tp::bench {

/// See Note [Upstream baseline]. Process-wide; call once, before any
/// workload runs. Does nothing outside glibc.
inline void pin_malloc_thresholds() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

/// A device and a caching allocator over it. A case uses either the
/// allocator or the device directly, never both, so neither sees the other's
/// memory. Not thread-safe to construct; both members are thread-safe.
struct rig {
  /// expandable: the allocator uses expandable segments (Note [Expandable
  /// segments] in caching_allocator.hpp); else plain segments.
  explicit rig(bool expandable = false) : cached(dev, options(expandable)) {}
  static caching_allocator::options options(bool expandable) {
    caching_allocator::options o;
    o.expandable_segments = expandable;
    return o;
  }
  manual_clock clk;  // nothing here waits on streams or copies
  simulated_device dev{simulated_device::options{.capacity_bytes = std::size_t{4} << 30}, clk};
  caching_allocator cached;
};

/// The caching allocator, as a Source (allocate(bytes), deallocate(ptr, bytes)).
struct cached_source {
  caching_allocator& alloc;
  void* allocate(std::size_t bytes) { return alloc.allocate(bytes); }
  void deallocate(void* p, std::size_t /*bytes*/) { alloc.deallocate(p); }
};

/// The device itself, uncached; see Note [Upstream baseline].
struct upstream_source {
  device& dev;
  void* allocate(std::size_t bytes) {
    void* p = dev.try_allocate(bytes);
    if (p == nullptr) throw out_of_memory("tp_allocator_bench: the simulated device is full");
    return p;
  }
  void deallocate(void* p, std::size_t bytes) { dev.deallocate(p, bytes); }
};

}  // namespace tp::bench
