#pragma once
// tp::pinned_host_pool: a cache of page-locked host memory, the destination of
// swapped-out tensors (DESIGN.md, "Swap"), with its own budget.
//
// Note [Pinned host size classes]
// Page-locking is slow (cudaHostAlloc takes milliseconds and cudaFreeHost
// synchronizes the device), so freed blocks are cached and reused, never
// split. A request is rounded up to a size class: a power of two, at least
// 4 KiB, up to 64 MiB; above 64 MiB, a multiple of 2 MiB (powers of two there
// would waste up to half). Power-of-two classes reuse only their own class.
// Large blocks sit in one best-fit map and a cached block serves a request
// only if it is at most 25% larger than the request's class: with no
// splitting, a cached 1 GiB block handed to a 66 MiB request would hold
// 958 MiB hostage. host_block::size reports the block's real size.
//
// Note [Pinned host budget]
// held = in use + cached + being allocated (by other threads, with the lock
// released) never exceeds host_budget. When a request would pass it, cached
// blocks are returned to the device, largest first, until it fits (or none
// are left); a device that returns nullptr gets the same reclaim and one
// retry. Only then does the fallback option decide: error throws
// tp::out_of_memory with the figures and a hint; pageable returns plain
// 4 KiB-aligned pageable memory, marked pinned == false. Pageable blocks are
// counted apart (pageable_bytes) and do not count against host_budget: the
// budget limits locked memory, which is what the OS runs short of. The pool
// never logs; the caller reads host_block::fallback and reports once.

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "device/device.hpp"

namespace tp {

/// What a full pinned pool does (Note [Pinned host budget]).
enum class host_fallback { error, pageable };

/// Why a block is pageable rather than pinned.
enum class host_fallback_reason {
  none,    ///< the block is pinned
  budget,  ///< pinned memory would have passed host_budget
  device,  ///< the device could not page-lock more memory
};

/// One allocation from the pool. A value; the pool owns the memory until
/// deallocate(ptr).
struct host_block {
  void* ptr = nullptr;
  std::size_t size = 0;  ///< usable bytes, >= the request (its size class)
  /// False for pageable fallback memory: copy_async from or to it is
  /// synchronous on CUDA, and a cuda_device may reject it.
  bool pinned = true;
  host_fallback_reason fallback = host_fallback_reason::none;
};

/// A snapshot of the pool's counters. Bytes are size-class bytes.
struct host_pool_stats {
  std::size_t in_use_bytes = 0;       ///< pinned, handed out
  std::size_t cached_bytes = 0;       ///< pinned, free, kept for reuse
  std::size_t peak_in_use_bytes = 0;  ///< max of in_use_bytes since construction
  std::size_t pageable_bytes = 0;     ///< pageable fallback, handed out
  std::size_t num_device_allocs = 0;  ///< successful device.try_allocate_host calls
  std::size_t num_cache_hits = 0;     ///< allocations served from the cache
  std::size_t num_fallbacks = 0;      ///< allocations served with pageable memory
};

struct pinned_host_pool_options {
  /// Cap on pinned bytes held (in use + cached); none: only the device's.
  std::optional<std::size_t> host_budget;
  host_fallback fallback = host_fallback::error;
};

/// A caching pool of page-locked host memory over one device.
///
/// Thread-safety: every member may be called from any thread (one mutex;
/// device calls are made with it released).
/// Streams: the pool knows none. The caller must not deallocate a block that
/// a pending copy_async still uses (the runtime frees after the copy's event).
/// Lifetime: the device must outlive the pool. The destructor returns every
/// block, in use or cached, to the device (or to the C heap for pageable ones);
/// pointers still handed out become invalid.
class pinned_host_pool {
 public:
  using options = pinned_host_pool_options;

  /// Largest request the pool accepts; anything larger throws out_of_memory.
  static constexpr std::size_t max_request_bytes = SIZE_MAX - ((std::size_t{2} << 20) - 1);

  explicit pinned_host_pool(device& dev, options opts = {});
  ~pinned_host_pool();
  pinned_host_pool(const pinned_host_pool&) = delete;
  pinned_host_pool& operator=(const pinned_host_pool&) = delete;

  /// Returns at least bytes (0 counts as 1) of host memory: pinned from the
  /// cache or the device, else per Note [Pinned host budget]. Throws
  /// tp::out_of_memory when fallback is error (or pageable memory also ran
  /// out); propagates a tp::error the device throws.
  host_block allocate(std::size_t bytes);

  /// Returns a block from allocate() to the pool: pinned ones are cached,
  /// pageable ones freed. nullptr is ignored. Requires: ptr came from
  /// allocate() and is not returned yet; a double free or a foreign pointer
  /// ends the process with a message (tp::fail_fast), as free() does.
  void deallocate(void* ptr) noexcept;

  /// Returns every cached block to the device (empty_cache for host memory).
  void release_cached() noexcept;

  /// Changes host_budget; none removes the cap. Cached blocks are released
  /// until held bytes fit. Throws tp::invalid_argument, changing nothing, when
  /// the new budget is below the pinned bytes in use.
  void set_budget(std::optional<std::size_t> host_budget);
  std::optional<std::size_t> budget() const;
  host_fallback fallback() const;

  host_pool_stats stats() const;

  /// The size class of a request (Note [Pinned host size classes]).
  /// Requires: bytes <= max_request_bytes. Pure.
  static std::size_t size_class(std::size_t bytes) noexcept;

 private:
  struct free_block {
    void* ptr;
    std::size_t size;
  };
  struct live_block {
    std::size_t size;
    bool pinned;
  };
  static constexpr std::size_t min_class_log2 = 12;  // 4 KiB
  static constexpr std::size_t max_class_log2 = 26;  // 64 MiB
  static constexpr std::size_t num_small_classes = max_class_log2 - min_class_log2 + 1;

  // All *_locked members require mu_ held.
  std::optional<free_block> take_cached_locked(std::size_t cls);
  bool fits_locked(std::size_t bytes) const;
  std::vector<free_block> trim_cache_locked(std::optional<std::size_t> limit);
  void release_to_device(const std::vector<free_block>& blocks) noexcept;
  host_block fallback_or_throw(std::size_t bytes, std::size_t cls, host_fallback_reason why);
  host_block hand_out_locked(free_block b, bool from_device);

  device& dev_;
  const host_fallback fallback_;
  mutable std::mutex mu_;
  std::optional<std::size_t> budget_;
  std::array<std::vector<void*>, num_small_classes> small_free_;
  std::multimap<std::size_t, void*> large_free_;
  std::unordered_map<void*, live_block> live_;
  std::size_t pending_bytes_ = 0;  // being allocated from the device, lock released
  host_pool_stats stats_;
};

}  // namespace tp
