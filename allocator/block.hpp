#pragma once
// The allocator's bookkeeping records: a segment is one piece of memory from
// the device; a block is a contiguous part of a segment, allocated or free.
// Internal to the caching allocator; guarded by its lock.

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "allocator/size_policy.hpp"
#include "device/device.hpp"

namespace tp::detail {

struct block;

/// One device allocation, split into a doubly linked list of blocks.
struct segment {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  stream_id stream{};
  pool_kind pool = pool_kind::small;
  block* first = nullptr;
};

/// A part of a segment. Free blocks sit in their pool (a block_pool) unless
/// they wait on stream events (pending_events > 0).
struct block {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // bytes asked for, while allocated
  stream_id stream{};         // the stream it was allocated on; reused there
  pool_kind pool = pool_kind::small;
  segment* seg = nullptr;
  block* prev = nullptr;  // neighbours in the segment, by address
  block* next = nullptr;
  bool allocated = false;
  int pending_events = 0;            // events still guarding a freed block
  std::vector<stream_id> stream_uses;  // other streams from record_stream

  void* ptr() const { return reinterpret_cast<void*>(address); }
  bool is_split() const { return prev != nullptr || next != nullptr; }
  /// Free, not waiting on events: a candidate for reuse and merging.
  bool is_cached() const { return !allocated && pending_events == 0; }
};

/// Orders free blocks by (stream, size, address): a lower_bound on
/// (stream, size, 0) finds the best fit on a stream.
struct block_order {
  bool operator()(const block* a, const block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->address < b->address;
  }
};

using block_pool = std::set<block*, block_order>;

}  // namespace tp::detail
