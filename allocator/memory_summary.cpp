#include "allocator/memory_summary.hpp"

#include <fmt/format.h>

#include "core/format_bytes.hpp"

namespace tp {
namespace {

constexpr int width = 92;

std::string bytes_cell(std::int64_t v) {
  // fmt rather than operator+: GCC 12 reports a false -Wrestrict on the latter.
  return v < 0 ? fmt::format("-{}", format_bytes(static_cast<std::size_t>(-v)))
               : format_bytes(static_cast<std::size_t>(v));
}

void row(std::string& out, const std::string& name, const stat& s, bool bytes) {
  const auto cell = [bytes](std::int64_t v) { return bytes ? bytes_cell(v) : std::to_string(v); };
  out += fmt::format("| {:<26}| {:>13} | {:>13} | {:>13} | {:>13} |\n", name, cell(s.current), cell(s.peak),
                     cell(s.allocated), cell(s.freed));
}

void rows(std::string& out, const char* name, const pooled_stat& p, bool bytes) {
  row(out, name, p.all(), bytes);
  row(out, "      from large pool", p.of(pool_kind::large), bytes);
  row(out, "      from small pool", p.of(pool_kind::small), bytes);
}

}  // namespace

std::string format_memory_summary(const allocator_stats& s, const std::string& title) {
  const std::string rule = "|" + std::string(width - 2, '-') + "|\n";
  const std::string heavy = "|" + std::string(width - 2, '=') + "|\n";
  std::string out = heavy;
  out += fmt::format("| {:<{}}|\n", title + " memory summary", width - 3);
  out += heavy;
  out += fmt::format("| {:<26}| {:>13} | {:>13} | {:>13} | {:>13} |\n", "Metric", "Cur Usage", "Peak Usage",
                     "Tot Alloc", "Tot Freed");
  out += rule;
  rows(out, "Allocated memory", s.allocated_bytes, true);
  out += rule;
  rows(out, "Active memory", s.active_bytes, true);
  out += rule;
  rows(out, "Requested memory", s.requested_bytes, true);
  out += rule;
  rows(out, "Reserved memory", s.reserved_bytes, true);
  out += rule;
  rows(out, "Non-releasable memory", s.inactive_split_bytes, true);
  out += rule;
  rows(out, "Allocations", s.allocation, false);
  out += rule;
  rows(out, "Segments", s.segment, false);
  out += rule;
  row(out, "Oversize allocations", s.oversize_allocations, false);
  row(out, "Oversize segments", s.oversize_segments, false);
  out += heavy;
  out += fmt::format("| {:<{}}|\n",
                     fmt::format("Budget: {}   Alloc retries: {}   OOMs: {}   Syncs: {}",
                                 s.budget < 0 ? std::string("none") : bytes_cell(s.budget), s.num_alloc_retries,
                                 s.num_ooms, s.num_sync_all_streams),
                     width - 3);
  out += fmt::format("| {:<{}}|\n",
                     fmt::format("Device allocs: {}   Device frees: {}   Reclaims: {} ({})", s.num_device_alloc,
                                 s.num_device_free, s.num_reclaims, bytes_cell(s.reclaimed_bytes)),
                     width - 3);
  out += heavy;
  return out;
}

}  // namespace tp
