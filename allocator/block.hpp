#pragma once
// The allocator's bookkeeping records: a segment is one piece of memory from
// the device (or one reserved address range, Note [Expandable segments] in
// caching_allocator.hpp); a block is a contiguous part of a segment,
// allocated or free, mapped or not. Internal to the caching allocator;
// guarded by its lock.

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "allocator/size_policy.hpp"
#include "device/device.hpp"

namespace tp::detail {

struct block;

/// Orders blocks by address (a segment's unmapped blocks).
struct address_order {
  bool operator()(const block* a, const block* b) const;
};

/// One device allocation, or one expandable segment, split into a doubly
/// linked list of blocks that covers it.
struct segment {
  std::uintptr_t address = 0;
  /// Plain: the bytes from the device. Expandable: the reserved address
  /// space, of which only the mapped blocks are backed (and reserved).
  std::size_t size = 0;
  stream_id stream{};
  pool_kind pool = pool_kind::small;
  lifetime life = lifetime::transient;  // Note [Long-lived placement]
  block* first = nullptr;
  bool expandable = false;
  /// Expandable: the blocks with no physical memory behind them, each a
  /// granule-aligned range, never two adjacent (they merge).
  std::set<block*, address_order> unmapped;
};

/// A part of a segment. Free mapped blocks sit in their pool (a block_pool)
/// unless they wait on stream events (pending_events > 0); unmapped blocks
/// sit in their segment's `unmapped` set.
struct block {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // bytes asked for, while allocated
  stream_id stream{};         // the stream it was allocated on; reused there
  pool_kind pool = pool_kind::small;
  lifetime life = lifetime::transient;  // its segment's
  segment* seg = nullptr;
  block* prev = nullptr;  // neighbours in the segment, by address
  block* next = nullptr;
  bool allocated = false;
  bool mapped = true;                  // false: address space only (expandable segments)
  int pending_events = 0;              // events still guarding a freed block
  std::vector<stream_id> stream_uses;  // other streams from record_stream

  void* ptr() const { return reinterpret_cast<void*>(address); }
  std::uintptr_t end() const { return address + size; }
  /// Has a mapped neighbour: one of several blocks of a segment (PyTorch's
  /// meaning), where an expandable segment counts each mapped range as a
  /// segment of its own, as snapshots show it.
  bool is_split() const { return (prev != nullptr && prev->mapped) || (next != nullptr && next->mapped); }
  /// Free, mapped, not waiting on events: a candidate for reuse and merging.
  bool is_cached() const { return !allocated && pending_events == 0 && mapped; }
};

inline bool address_order::operator()(const block* a, const block* b) const { return a->address < b->address; }

/// Orders free blocks by (lifetime, stream, size, address): a lower_bound on
/// (lifetime, stream, size, 0) finds the best fit on a stream, among the
/// blocks of one lifetime (Note [Long-lived placement]).
struct block_order {
  bool operator()(const block* a, const block* b) const {
    if (a->life != b->life) return a->life < b->life;
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->address < b->address;
  }
};

using block_pool = std::set<block*, block_order>;

}  // namespace tp::detail
