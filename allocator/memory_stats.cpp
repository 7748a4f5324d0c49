#include "allocator/memory_stats.hpp"

#include <fmt/format.h>

namespace tp {
namespace {

void for_each_pooled(allocator_stats& s, void (*fn)(stat&)) {
  for (pooled_stat* p : {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
                         &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes,
                         &s.requested_bytes}) {
    for (stat& x : p->by) fn(x);
  }
  fn(s.oversize_allocations);
  fn(s.oversize_segments);
}

void put(std::map<std::string, std::int64_t>& out, const std::string& prefix, const stat& x) {
  out[prefix + ".current"] = x.current;
  out[prefix + ".peak"] = x.peak;
  out[prefix + ".allocated"] = x.allocated;
  out[prefix + ".freed"] = x.freed;
}

void put(std::map<std::string, std::int64_t>& out, const char* name, const pooled_stat& p) {
  constexpr const char* pools[] = {"all", "small_pool", "large_pool"};
  for (std::size_t i = 0; i < p.by.size(); ++i) put(out, fmt::format("{}.{}", name, pools[i]), p.by[i]);
}

}  // namespace

void allocator_stats::reset_peak() {
  for_each_pooled(*this, [](stat& x) { x.reset_peak(); });
}

void allocator_stats::reset_accumulated() {
  for_each_pooled(*this, [](stat& x) { x.reset_accumulated(); });
  num_alloc_retries = num_ooms = num_sync_all_streams = 0;
  num_device_alloc = num_device_free = num_reclaims = reclaimed_bytes = num_device_syncs = 0;
}

std::map<std::string, std::int64_t> to_memory_stats(const allocator_stats& s) {
  std::map<std::string, std::int64_t> out;
  put(out, "allocation", s.allocation);
  put(out, "segment", s.segment);
  put(out, "active", s.active);
  put(out, "inactive_split", s.inactive_split);
  put(out, "allocated_bytes", s.allocated_bytes);
  put(out, "reserved_bytes", s.reserved_bytes);
  put(out, "active_bytes", s.active_bytes);
  put(out, "inactive_split_bytes", s.inactive_split_bytes);
  put(out, "requested_bytes", s.requested_bytes);
  put(out, "oversize_allocations", s.oversize_allocations);
  put(out, "oversize_segments", s.oversize_segments);
  out["num_alloc_retries"] = s.num_alloc_retries;
  out["num_ooms"] = s.num_ooms;
  out["num_sync_all_streams"] = s.num_sync_all_streams;
  out["num_device_alloc"] = s.num_device_alloc;
  out["num_device_free"] = s.num_device_free;
  out["max_split_size"] = s.max_split_size;
  out["tensorpager.budget"] = s.budget;
  out["tensorpager.num_reclaims"] = s.num_reclaims;
  out["tensorpager.reclaimed_bytes"] = s.reclaimed_bytes;
  out["tensorpager.num_device_syncs"] = s.num_device_syncs;
  return out;
}

}  // namespace tp
