#include "allocator/oom_report.hpp"

#include <fmt/format.h>

#include "core/format_bytes.hpp"

namespace tp {

std::string format_oom_message(const oom_figures& f) {
  std::string msg = fmt::format("tensorpager: out of memory: tried to allocate {} (device '{}', stream {:#x}).",
                                format_bytes(f.requested), f.device_name, to_underlying(f.stream));
  if (f.larger_than_device) {
    msg += fmt::format(" The request is larger than the device's total memory ({}).",
                       format_bytes(f.device.total_bytes));
    return msg;
  }
  const std::size_t cached = f.reserved - f.allocated;
  const double fragmentation =
      f.reserved == 0 ? 0.0 : 100.0 * static_cast<double>(cached) / static_cast<double>(f.reserved);
  msg += fmt::format(" Budget: {}; {} allocated, {} reserved, of which {} cached but free",
                     f.budget ? format_bytes(*f.budget) : std::string("none"), format_bytes(f.allocated),
                     format_bytes(f.reserved), format_bytes(cached));
  msg += fmt::format(" (largest free block {}, fragmentation {:.1f}%). Device: {} total, {} free.",
                     format_bytes(f.largest_free_block), fragmentation, format_bytes(f.device.total_bytes),
                     format_bytes(f.device.free_bytes));
  msg += fmt::format(" Reclaim freed {}", format_bytes(f.reclaimed));
  msg += f.reclaimer_account.empty() ? "." : fmt::format(" ({}).", f.reclaimer_account);
  const bool budget_bound = f.budget && f.reserved + f.requested > *f.budget;
  if (budget_bound) {
    msg += " Hint: raise the budget (key 'budget') or reduce the batch size.";
  } else if (cached >= f.requested) {
    msg += " Hint: the free memory is fragmented; a smaller 'max_split_size' may help.";
  } else {
    msg += " Hint: the device itself is full; free tensors or reduce the batch size.";
  }
  return msg;
}

}  // namespace tp
