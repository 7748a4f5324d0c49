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
  // A runtime that tracks nothing yet describes nothing, and is there.
  const bool has_runtime = f.has_reclaimer;
  if (has_runtime || f.reclaimed > 0) {
    msg += fmt::format(" Reclaim freed {}", format_bytes(f.reclaimed));
    msg += !f.reclaimer_account.empty() ? fmt::format(" ({}).", f.reclaimer_account) : ".";
  }
  // Note [Why a reclaim fell short] in runtime/reclaim_account.hpp: the allocator's part.
  const bool fragmented = cached >= f.requested && f.largest_free_block < f.requested;
  if (fragmented) {
    msg += fmt::format(" The free memory is fragmented: {} is cached but free, but the largest free block ({}) is "
                       "smaller than the request, and the rest lies between blocks still in use.",
                       format_bytes(cached), format_bytes(f.largest_free_block));
  }
  if (f.stranded > 0) {
    // What stranded it: the blocks in use that share those granules.
    msg += fmt::format(" {} of the free memory is in granules shared with blocks in use, which no unmap can give "
                       "back: beside {} transient and {} long-lived blocks.",
                       format_bytes(f.stranded), f.stranded_beside_transient, f.stranded_beside_long_lived);
  }
  const bool budget_bound = f.budget && f.reserved + f.requested > *f.budget;
  if (budget_bound) {
    msg += " Hint: raise the budget (key 'budget') or reduce the batch size";
    // Nothing evicts under this budget yet: say that tensorpager can.
    msg += has_runtime ? "." : "; or let tensorpager swap activations to host memory and recompute them to stay under "
                               "it: wrap the training loop in `with tensorpager.budget(...)` (Python) or a "
                               "`tensorpager::budget_scope` (C++).";
  } else if (fragmented && !f.expandable_segments) {
    msg += " Hint: 'expandable_segments:True' lets free memory be unmapped and mapped where it is needed (a "
           "smaller 'max_split_size' also keeps large blocks whole).";
  } else if (fragmented) {
    msg += " Hint: the free memory is in granules shared with blocks in use; free or evict those tensors, or "
           "reduce the batch size.";
  } else {
    msg += " Hint: the device itself is full; free tensors or reduce the batch size.";
  }
  return msg;
}

}  // namespace tp
