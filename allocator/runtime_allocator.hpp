#pragma once
// tp::runtime_allocator: what the budget runtime (runtime/) needs of the
// allocator its tensors live in, named in one place.

#include <cstddef>
#include <optional>

#include "allocator/memory_stats.hpp"
#include "allocator/reclaimer.hpp"
#include "device/device.hpp"

namespace tp {

/// The allocator as the budget runtime uses it: the budget and reserved
/// bytes it plans and offloads against; stream-ordered release of the
/// storage it evicts (Note [Offload ordering] in runtime/transfer_engine.hpp);
/// the reclaimer hook (Note [Reclaim] in caching_allocator.hpp); and the
/// allocated-bytes high-water mark that Note [Resident floor] (runtime/
/// resident_floor.hpp) samples. caching_allocator implements it; the
/// high-water mark is reachable only through this interface.
///
/// Thread-safety: every member may be called from any thread. Lifetime: the
/// allocator outlives whatever holds it through this interface.
class runtime_allocator {
 public:
  /// Bytes allocated: the most at once since the previous
  /// take_allocated_high_water() (or since construction), and now.
  struct allocated_marks {
    std::size_t high_water = 0;
    std::size_t now = 0;
  };

  /// The cap on reserved bytes; none: only the device's memory limits them.
  virtual std::optional<std::size_t> budget() const = 0;
  /// The allocator's statistics, in torch.cuda.memory_stats() terms.
  virtual allocator_stats stats() const = 0;
  /// The size of the block behind an allocated pointer, or 0 if unknown.
  virtual std::size_t allocation_size(const void* ptr) const = 0;
  /// Declares that `stream` also uses the allocation at `ptr` (Note
  /// [Stream-ordered reuse]). Throws tp::invalid_argument for an unknown
  /// pointer or stream.
  virtual void record_stream(void* ptr, stream_id stream) = 0;
  /// Registers the reclaimer of Note [Reclaim] (nullptr: none). Not owned.
  virtual void set_reclaimer(reclaimer* r) = 0;
  /// The marks since the previous call; the count restarts from now. For
  /// one reader (the runtime's Note [Resident floor]); stats() peaks are
  /// untouched.
  virtual allocated_marks take_allocated_high_water() = 0;
  /// Free bytes that no release of the cache can give back, since blocks in
  /// use hold them mapped: in an expandable segment, the parts of free blocks
  /// outside whole granules; in a plain segment, every free block of a
  /// segment with a block in use. Note [Resident floor] counts them at a
  /// step's start. O(free blocks).
  virtual std::size_t stranded_bytes() const = 0;
  /// The unit reserved bytes come in with expandable segments (the device's
  /// map granule), so a budget holds only whole ones; 0 with plain segments.
  virtual std::size_t granularity() const = 0;

 protected:
  ~runtime_allocator() = default;
};

}  // namespace tp
