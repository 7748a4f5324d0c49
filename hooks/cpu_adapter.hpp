#pragma once
// cpu_adapter: tensorpager's caching allocator behind torch's CPU allocator,
// over a simulated device, so CPU tensors live under the same budget,
// statistics and snapshots as CUDA tensors do (DESIGN.md, "Testing without a
// GPU"). Includes torch.
//
// Note [Adapters live forever]
// Torch keeps pointers to an allocator long after choosing it: every
// DataPtr's deleter, and every StorageImpl, which allocates through the
// allocator it was created with when it is resized. Tensors may be freed at
// interpreter exit after static destructors have run, and a storage made
// while tensorpager was installed may grow after uninstall(). So an adapter,
// once created, is never destroyed: create() returns a heap object that is
// intentionally leaked, and the table the deleter searches is leaked too.
// uninstall() only gives torch its previous allocator back and releases the
// cached free memory; allocations still live keep being served and freed by
// the adapter that made them. The cost is a few hundred bytes per install.

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <c10/core/Allocator.h>

#include "allocator/caching_allocator.hpp"
#include "allocator/pinned_host_pool.hpp"
#include "core/clock.hpp"
#include "device/simulated_device.hpp"
#include "hooks/allocator_control.hpp"
#include "config/config.hpp"
#include "hooks/profiler_glue.hpp"
#include "hooks/runtime_host.hpp"
#include "profiler/allocator_recorder.hpp"

namespace tp::hooks {

/// How budget errors name the cpu adapter's device.
inline constexpr std::string_view simulated_device_name = "the simulated device behind the cpu adapter";

/// A c10::Allocator for DeviceType::CPU over one tp::caching_allocator and a
/// tp::simulated_device of config::sim_capacity bytes, on its default stream.
///
/// Thread-safety: every member may be called from any thread; install() and
/// uninstall() must not race with each other (install.cpp serialises them).
/// Lifetime: see Note [Adapters live forever].
/// Errors: allocate() throws c10::OutOfMemoryError carrying tensorpager's
/// out-of-memory message; deleters never throw.
class cpu_adapter final : public c10::Allocator,
                          public allocator_control,
                          public event_log_attachable,
                          public runtime_host {
 public:
  /// The largest number of adapters one process may create (each install
  /// after an uninstall creates one).
  static constexpr std::size_t max_adapters = 64;

  /// Creates an adapter for cfg (cfg.device is ignored), not yet installed.
  /// The object is never destroyed. Throws tp::error after max_adapters
  /// creations, tp::invalid_argument when cfg's sizes are impossible.
  static cpu_adapter& create(const config& cfg);

  /// Makes this torch's CPU allocator (c10::SetCPUAllocator) and remembers
  /// the allocator it replaces. Throws tp::error if torch did not take it.
  void install();
  /// Gives torch back the allocator install() replaced and releases cached
  /// free memory. Live allocations stay valid. Does nothing unless installed.
  void uninstall();
  bool installed() const { return previous_ != nullptr; }

  /// The caching allocator behind the adapter.
  caching_allocator& allocator() { return allocator_; }

  // --- c10::Allocator ----------------------------------------------------------
  c10::DataPtr allocate(std::size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // --- allocator_control ------------------------------------------------------
  device_kind kind() const override { return device_kind::cpu; }
  std::string device_description() override;
  allocator_stats memory_stats() override;
  std::vector<segment_snapshot> segments() override;
  void change_budget(std::optional<std::size_t> bytes) override;
  std::optional<std::size_t> budget_bytes() override;
  void restore_configured_budget() override;
  void release_cache() override;
  void reset_peaks() override;

  // --- event_log_attachable (the timeline, profiler_glue.hpp) ------------------
  void attach_event_log(profiler::event_log* log) override;

  // --- runtime_host (the budget runtime, budget_session.hpp) --------------------
  runtime_resources runtime_resources_now() override;

 private:
  explicit cpu_adapter(const config& cfg);
  ~cpu_adapter() override = default;

  /// allocate()'s body, and runtime_resources::allocate_on's.
  void* allocate_on(const device_request& r);
  /// The DeleterFnPtr of every DataPtr: finds the adapter that owns ptr.
  static void free_ptr(void* ptr) noexcept;
  /// Frees ptr if this adapter allocated it; false (nothing done) otherwise.
  bool try_free(void* ptr);

  steady_clock clock_;
  simulated_device device_;
  caching_allocator allocator_;
  const std::optional<std::size_t> configured_budget_ = allocator_.budget();
  pinned_host_pool host_pool_;  // where the runtime swaps tensors out to
  c10::Allocator* previous_ = nullptr;  // set while installed
  std::mutex recorder_mutex_;           // serialises attach_event_log()
  profiler::allocator_recorder* recorder_ = nullptr;  // allocator_'s trace while recording; the log owns it
};

}  // namespace tp::hooks
