#pragma once
// A text table of allocator statistics, laid out like
// torch.cuda.memory_summary(), for logs, the demo and tp.memory_summary().

#include <string>

#include "allocator/memory_stats.hpp"

namespace tp {

/// Formats the statistics as a fixed-width table: one row per metric
/// (allocated, active, requested, reserved, inactive split bytes; allocation,
/// segment counts) and pool, columns current / peak / total allocated / total
/// freed, then the event counters and the budget. Pure.
std::string format_memory_summary(const allocator_stats& s, const std::string& title = "tensorpager");

}  // namespace tp
