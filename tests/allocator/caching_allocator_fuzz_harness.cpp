// fuzz_harness's whole-allocator checks (Note [Fuzz model] in
// caching_allocator_fuzz_run.hpp).

#include "caching_allocator_fuzz_harness.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace tp::testing {

void fuzz_harness::check_invariants() {
  const auto snap = alloc_.snapshot();
  const auto s = alloc_.stats();
  std::int64_t reserved = 0, allocated = 0, active = 0, inactive_split = 0, n_alloc = 0;
  std::int64_t n_active = 0, n_inactive_split = 0;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spans;
  const std::size_t g = rig_.dev.granularity();
  for (const auto& seg : snap) {
    reserved += std::int64_t(seg.total_size);
    // With expandable segments, a plain segment is the fallback of Note
    // [Expandable segments], "Less than a granule"; without, nothing is expandable.
    if (seg.expandable && !alloc_.expandable_segments()) counts.invariant_failures++;
    if (seg.expandable && (seg.address % g != 0 || seg.total_size % g != 0)) {
      ADD_FAILURE() << "a mapped range of " << seg.total_size << " B at " << seg.address << " is not whole granules";
      counts.invariant_failures++;
    }
    std::uintptr_t next = seg.address;
    for (const auto& b : seg.blocks) {
      if (b.address != next) counts.invariant_failures++;
      next = b.address + b.size;
      if (b.state == block_state::active_allocated) {
        allocated += std::int64_t(b.size);
        ++n_alloc;
        spans.emplace_back(b.address, b.address + b.size);
      }
      if (b.state != block_state::inactive) {
        active += std::int64_t(b.size);
        ++n_active;
      }
      if (b.state == block_state::inactive && seg.blocks.size() > 1) {
        inactive_split += std::int64_t(b.size);
        ++n_inactive_split;
      }
    }
    if (next != seg.address + seg.total_size) counts.invariant_failures++;
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second) counts.invariant_failures++;
  }
  const bool ok = reserved == s.reserved_bytes.all().current && allocated == s.allocated_bytes.all().current &&
                  active == s.active_bytes.all().current &&
                  inactive_split == s.inactive_split_bytes.all().current &&
                  n_alloc == s.allocation.all().current && n_active == s.active.all().current &&
                  n_inactive_split == s.inactive_split.all().current &&
                  std::int64_t(snap.size()) == s.segment.all().current &&
                  (s.budget < 0 || reserved <= s.budget);
  const memory_info m = rig_.dev.memory();
  if (alloc_.expandable_segments() && std::int64_t(m.total_bytes - m.free_bytes) != reserved) {
    ADD_FAILURE() << "the device has " << m.total_bytes - m.free_bytes << " B mapped, the allocator reserves "
                  << reserved;
    counts.invariant_failures++;
  }
  if (!ok) {
    ADD_FAILURE() << "statistics disagree with the blocks: reserved " << reserved << "/"
                  << s.reserved_bytes.all().current << ", allocated " << allocated << "/"
                  << s.allocated_bytes.all().current << ", active " << active << "/"
                  << s.active_bytes.all().current << ", inactive_split " << inactive_split << "/"
                  << s.inactive_split_bytes.all().current << " (" << n_inactive_split << "/"
                  << s.inactive_split.all().current << " blocks), segments " << snap.size() << "/"
                  << s.segment.all().current;
    counts.invariant_failures++;
  }
}

void fuzz_harness::finish() {
  for (const guard& g : guards_) rig_.dev.destroy_event(g.event);
  guards_.clear();
  check_invariants();
  const auto s = alloc_.stats();
  counts.device_allocs = s.num_device_alloc;
  counts.device_frees = s.num_device_free;
  EXPECT_EQ(s.allocated_bytes.all().current, 0);
  alloc_.empty_cache();
  EXPECT_EQ(alloc_.stats().reserved_bytes.all().current, 0);
}

}  // namespace tp::testing
