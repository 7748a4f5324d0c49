#pragma once
// What the C++ API (install.cpp) needs from an installed adapter, whether it
// serves the CPU (cpu_adapter) or CUDA devices (cuda_adapter). Names differ
// from c10's (memory_stats, not getDeviceStats) so that an adapter can
// implement both interfaces without overloads that hide each other.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "allocator/memory_stats.hpp"
#include "allocator/snapshot.hpp"
#include "config/config.hpp"

namespace tp::hooks {

/// Control of one installed adapter. "The current device" is the only device
/// for the CPU adapter and PyTorch's current CUDA device for the CUDA one.
///
/// Thread-safety: every member may be called from any thread.
/// Errors: tp::invalid_argument for a request that cannot be met (nothing
/// changes), tp::error or tp::cuda_error for a device failure.
class allocator_control {
 public:
  virtual ~allocator_control() = default;

  /// Which device kind the adapter serves.
  virtual device_kind kind() const = 0;
  /// A short phrase naming the device, for memory_summary()
  /// ("cpu, simulated device of 65536 MiB", "cuda:0, NVIDIA H200").
  virtual std::string device_description() = 0;
  /// Statistics of the current device's allocator.
  virtual allocator_stats memory_stats() = 0;
  /// Segments of the current device's allocator, by address.
  virtual std::vector<segment_snapshot> segments() = 0;
  /// Sets (or, with nullopt, clears) the budget of every device, including
  /// devices first used later. See caching_allocator::set_budget.
  virtual void change_budget(std::optional<std::size_t> bytes) = 0;
  /// The current device's budget in bytes; nullopt when there is none.
  virtual std::optional<std::size_t> budget_bytes() = 0;
  /// budget_bytes() when it can be told without opening a device; the outer
  /// nullopt when it cannot (a share of a CUDA device not used yet: Note [A
  /// session opens its device at the first tensor] in budget_session.hpp).
  virtual std::optional<std::optional<std::size_t>> budget_if_known() { return budget_bytes(); }
  /// Undoes change_budget(): every device has the configured budget again.
  virtual void restore_configured_budget() = 0;
  /// Returns every cached free segment of every device to the device.
  virtual void release_cache() = 0;
  /// Resets the peak statistics of the current device.
  virtual void reset_peaks() = 0;
};

}  // namespace tp::hooks
