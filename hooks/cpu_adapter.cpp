#include "hooks/cpu_adapter.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>

#include <c10/core/CPUAllocator.h>

#include "core/errors.hpp"
#include "hooks/c10_errors.hpp"
#include "hooks/process_state.hpp"

namespace tp::hooks {
namespace {

using adapter_table = cpu_adapter_table;
static_assert(adapter_table::capacity == cpu_adapter::max_adapters);

/// Every adapter ever created, for the deleter to search, newest last
/// (Note [Process state], Note [Adapters live forever]).
adapter_table& table() { return process().cpu_adapters; }

/// The priority of c10::SetCPUAllocator: it replaces the current allocator
/// only at a priority at least as high as the current one's, and torch's
/// default has 0. The highest lets tensorpager take over from anything; the
/// cost is that after uninstall() the restored allocator keeps this priority,
/// so later SetCPUAllocator calls with a lower one are ignored.
constexpr std::uint8_t install_priority = std::numeric_limits<std::uint8_t>::max();

simulated_device::options device_options(const config& cfg) {
  simulated_device::options o;
  o.capacity_bytes = cfg.sim_capacity;
  return o;
}

caching_allocator::options allocator_options(const config& cfg) {
  caching_allocator::options o;
  // A share of the peak has no size until the first step: the runtime sets it.
  if (cfg.budget && cfg.budget->resolvable_now()) o.budget = cfg.budget->resolve(cfg.sim_capacity);
  if (cfg.max_split_size) o.max_split_size = *cfg.max_split_size;
  o.expandable_segments = cfg.expandable_segments;
  return o;
}

void report_to_profiler(void* ptr, std::int64_t delta, const allocator_stats& s) {
  c10::reportMemoryUsageToProfiler(ptr, delta, static_cast<std::size_t>(s.allocated_bytes.all().current),
                                   static_cast<std::size_t>(s.reserved_bytes.all().current),
                                   c10::Device(c10::DeviceType::CPU));
}

pinned_host_pool::options host_pool_options(const config& cfg) {
  pinned_host_pool::options o;
  o.host_budget = cfg.host_budget;
  o.fallback = cfg.host_fallback == host_fallback_mode::pageable ? host_fallback::pageable : host_fallback::error;
  return o;
}

}  // namespace

cpu_adapter::cpu_adapter(const config& cfg)
    : device_(device_options(cfg), clock_),
      allocator_(device_, allocator_options(cfg)),
      host_pool_(device_, host_pool_options(cfg)) {}

runtime_resources cpu_adapter::runtime_resources_now() {
  runtime_resources res{device_, allocator_, host_pool_, clock_, default_stream, /*host_synchronous=*/true};
  res.allocate_on = [this](const device_request& r) { return allocate_on(r); };
  return res;
}


cpu_adapter& cpu_adapter::create(const config& cfg) {
  adapter_table& t = table();
  if (t.count.load(std::memory_order_acquire) >= max_adapters) {
    throw error("tensorpager: the CPU allocator was installed " + std::to_string(max_adapters) +
                " times in this process, the most it supports; install once and change the budget "
                "with set_budget() instead of reinstalling");
  }
  auto* adapter = new cpu_adapter(cfg);  // intentionally leaked: Note [Adapters live forever]
  const std::size_t slot = t.count.fetch_add(1, std::memory_order_acq_rel);
  if (slot >= max_adapters) {
    throw error("tensorpager: too many CPU allocator installs in this process");  // raced past the check
  }
  t.slots[slot].store(adapter, std::memory_order_release);
  return *adapter;
}

void cpu_adapter::install() {
  if (installed()) return;
  c10::Allocator* previous = c10::GetCPUAllocator();
  c10::SetCPUAllocator(this, install_priority);
  if (c10::GetCPUAllocator() != this) {
    throw error("tensorpager: torch did not accept tensorpager's CPU allocator (c10::SetCPUAllocator "
                "kept the allocator it had)");
  }
  previous_ = previous;
}

void cpu_adapter::uninstall() {
  if (!installed()) return;
  // Only restore if nobody replaced us since; otherwise leave theirs in place.
  if (c10::GetCPUAllocator() == this) c10::SetCPUAllocator(previous_, install_priority);
  previous_ = nullptr;
  allocator_.empty_cache();
}

c10::DataPtr cpu_adapter::allocate(std::size_t n) {
  void* ptr = allocate_on({n, default_stream});
  return {ptr, ptr, &cpu_adapter::free_ptr, c10::Device(c10::DeviceType::CPU)};
}

void* cpu_adapter::allocate_on(const device_request& r) {
  const std::size_t n = r.bytes;
  void* ptr = nullptr;
  try {
    ptr = with_c10_errors([&] {
      return r.may_reclaim ? allocator_.allocate(n, r.stream, r.life) : allocator_.try_allocate(n, r.stream, r.life);
    });
  } catch (const c10::OutOfMemoryError&) {
    const allocator_stats s = allocator_.stats();
    c10::reportOutOfMemoryToProfiler(static_cast<std::int64_t>(n),
                                     static_cast<std::size_t>(s.allocated_bytes.all().current),
                                     static_cast<std::size_t>(s.reserved_bytes.all().current),
                                     c10::Device(c10::DeviceType::CPU));
    throw;
  }
  if (ptr != nullptr && c10::memoryProfilingEnabled()) {
    report_to_profiler(ptr, static_cast<std::int64_t>(allocator_.allocation_size(ptr)), allocator_.stats());
  }
  return ptr;
}

c10::DeleterFnPtr cpu_adapter::raw_deleter() const { return &cpu_adapter::free_ptr; }

void cpu_adapter::copy_data(void* dest, const void* src, std::size_t count) const {
  default_copy_data(dest, src, count);
}

bool cpu_adapter::try_free(void* ptr) {
  const std::size_t size = allocator_.allocation_size(ptr);
  if (size == 0) return false;
  allocator_.deallocate(ptr);
  if (c10::memoryProfilingEnabled()) report_to_profiler(ptr, -static_cast<std::int64_t>(size), allocator_.stats());
  return true;
}

void cpu_adapter::free_ptr(void* ptr) noexcept {
  if (ptr == nullptr) return;
  adapter_table& t = table();
  std::size_t n = t.count.load(std::memory_order_acquire);
  if (n > max_adapters) n = max_adapters;
  try {
    for (std::size_t i = n; i-- > 0;) {  // newest first: the likeliest owner
      cpu_adapter* a = t.slots[i].load(std::memory_order_acquire);
      if (a != nullptr && a->try_free(ptr)) return;
    }
    std::fprintf(stderr, "tensorpager: freeing %p, which no tensorpager CPU allocator holds; ignored\n", ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorpager: freeing %p failed: %s\n", ptr, e.what());
  }
}

std::string cpu_adapter::device_description() {
  const memory_info m = device_.memory();
  return "cpu, simulated device of " + std::to_string(m.total_bytes >> 20) + " MiB";
}

allocator_stats cpu_adapter::memory_stats() { return allocator_.stats(); }

std::vector<segment_snapshot> cpu_adapter::segments() { return allocator_.snapshot(); }

void cpu_adapter::change_budget(std::optional<std::size_t> bytes) {
  // The same refusal as the budget key's (0 bytes, more than the device).
  if (bytes) (void)memory_budget{*bytes}.resolve_for_device(device_.memory().total_bytes, simulated_device_name);
  allocator_.set_budget(bytes);
}

std::optional<std::size_t> cpu_adapter::budget_bytes() { return allocator_.budget(); }

void cpu_adapter::restore_configured_budget() { allocator_.set_budget(configured_budget_); }

void cpu_adapter::release_cache() { allocator_.empty_cache(); }

void cpu_adapter::reset_peaks() { allocator_.reset_peak_stats(); }

void cpu_adapter::attach_event_log(profiler::event_log* log) {
  std::lock_guard lock(recorder_mutex_);
  if (log == nullptr) {
    allocator_.set_log(nullptr);  // once it returns no record is on its way in
    recorder_ = nullptr;             // the log keeps it, and its records
    return;
  }
  // Note [Recording start] in profiler_glue.cpp.
  profiler::allocator_recorder& recorder = log->open_allocator_recorder(0);
  log->set_device_name(0, device_description());
  const std::optional<std::size_t> budget = allocator_.budget();
  log->add_initial({0, allocator_.snapshot(), budget ? static_cast<std::int64_t>(*budget) : -1});
  allocator_.set_log(&recorder);
  recorder_ = &recorder;
}

}  // namespace tp::hooks
