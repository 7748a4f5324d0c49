// cuda_adapter, the allocating half: installation, devices, allocation and
// freeing, copies. Statistics, snapshots, budgets and observers are in
// cuda_adapter_inspection.cpp; streams and trace entries in
// cuda_adapter_streams.cpp; the unsupported features in
// cuda_adapter_unsupported.cpp.
//
// Note [No CUDA call before the first allocation]
// The adapter is installed when torch is imported (Note [Start-up hook] in
// python/tensorpager/_import_hook.py). A CUDA call there would initialise the
// driver during `import torch`: a CUDA_VISIBLE_DEVICES set afterwards would be
// ignored, and a process forked afterwards could not use CUDA. PyTorch defers
// its own initialisation to the first use, and so does tensorpager: creating
// and installing the adapter, init(), and every statistic of a device not
// used yet make no CUDA call; the platform loads the driver when the first
// device is opened, which is the first allocation on it (or an explicit
// query about it, such as torch.cuda.mem_get_info). Tests count the driver
// calls (cuda_platform::driver_calls) to hold this.
//
// Note [Device guards]
// Two kinds of current device matter. The driver's current context: every
// tp::cuda_device call makes its own device's context current and restores
// the caller's (Note [CUDA current context] in device/cuda/cuda_device.hpp),
// so a device call is right whatever is current. And PyTorch's current
// device: an allocation may run the budget runtime's reclaim, which may
// recompute activations through PyTorch, which allocates on PyTorch's current
// device. So every allocation runs with its own device current
// (platform_device_guard), and so do the calls made for a given device
// (setMemoryFraction, cacheInfo, getMemoryInfo). On the fast path the device
// is the current one and the guard only reads it.

#include "hooks/cuda_adapter.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>

#include <c10/core/Allocator.h>

#include "core/errors.hpp"
#include "hooks/c10_cuda_platform.hpp"
#include "hooks/c10_errors.hpp"
#include "hooks/process_state.hpp"

// Note [CUDAAllocator's inline getMemoryInfo]
// torch's CUDAAllocator defines getMemoryInfo in its header, calling
// cudaMemGetInfo. This file holds cuda_adapter's constructor, so the compiler
// emits CUDAAllocator's vtable here (the base's constructor stores it) and,
// with it, that function. cuda_adapter overrides getMemoryInfo (through its
// device), so the base's copy is never called; declaring the runtime function
// weak keeps its reference from making tensorpager._C depend on a CUDA runtime
// (Note [Driver API only] in device/cuda/driver_api.hpp; the symbols check
// accepts weak references, which load nothing).
#pragma weak cudaMemGetInfo

namespace tp::hooks {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;

/// The installed adapter, for the deleter of every DataPtr it made.
std::atomic<cuda_adapter*>& installed_adapter() { return process().cuda; }  // Note [Process state]

/// The priority of c10::SetAllocator; see install_priority in cpu_adapter.cpp.
constexpr std::uint8_t install_priority = std::numeric_limits<std::uint8_t>::max();

stream_id to_stream_id(cudaStream_t s) { return stream_id{reinterpret_cast<std::uintptr_t>(s)}; }
cudaStream_t to_cuda_stream(stream_id s) { return reinterpret_cast<cudaStream_t>(to_underlying(s)); }

std::size_t index_of(c10::DeviceIndex device) {
  if (device < 0) throw invalid_argument("tensorpager: negative CUDA device index " + std::to_string(device));
  return static_cast<std::size_t>(device);
}

// Expandable segments (Note [Expandable segments] in caching_allocator.hpp)
// need the driver's virtual memory management. A device or driver without it
// gets plain segments, and says so once per device.
bool vmm_usable(const device& dev, std::size_t index) {
  try {
    (void)dev.granularity();
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "tensorpager: CUDA device %zu: expandable_segments:True needs virtual memory management (%s); "
                 "using plain segments\n",
                 index, e.what());
    return false;
  }
}

}  // namespace

cuda_adapter::cuda_adapter(const config& cfg, std::unique_ptr<cuda_platform> platform)
    : config_(cfg), platform_(platform != nullptr ? std::move(platform) : make_c10_cuda_platform()) {}

cuda_adapter& cuda_adapter::create(const config& cfg, std::unique_ptr<cuda_platform> platform) {
  return *new cuda_adapter(cfg, std::move(platform));  // intentionally leaked: Note [CUDA adapter installation]
}

void cuda_adapter::install() {
  namespace cca = c10::cuda::CUDACachingAllocator;
  cca::CUDAAllocator* current = cca::get();
  if (current == this) return;
  // No device count, no driver: Note [No CUDA call before the first
  // allocation]. Without a GPU the first CUDA allocation says so.
  if (current != nullptr && current->initialized()) {
    // PyTorch initialised CUDA already (so counting devices costs nothing
    // new) and will not call init() again.
    const int count = platform_->device_count();
    for (c10::DeviceIndex d = 0; d < count; ++d) {
      const auto reserved = current->getDeviceStats(d).reserved_bytes[0].current;
      if (reserved > 0) {
        throw config_error("tensorpager: cannot install on CUDA: PyTorch's allocator ('" + current->name() +
                           "') already holds " + std::to_string(reserved) + " bytes on cuda:" +
                           std::to_string(d) + ". Install before the first CUDA tensor (import tensorpager "
                           "before using torch.cuda, or set PYTORCH_CUDA_ALLOC_CONF=backend:tensorpager)");
      }
    }
    device_count_.store(count);
    initialized_.store(true);
  }
  installed_adapter().store(this);
  cca::allocator.store(this);
  c10::SetAllocator(c10::DeviceType::CUDA, this, install_priority);
}

// --- devices --------------------------------------------------------------------

caching_allocator* cuda_adapter::opened(c10::DeviceIndex device) const noexcept {
  if (device < 0 || static_cast<std::size_t>(device) >= max_devices) return nullptr;
  return allocators_[static_cast<std::size_t>(device)].load(std::memory_order_acquire);
}

caching_allocator* cuda_adapter::opened_current() {
  if (device_limit_.load(std::memory_order_acquire) == 0) return nullptr;  // nothing to ask CUDA about
  return opened(static_cast<c10::DeviceIndex>(platform_->current_device()));
}

void cuda_adapter::check_device(c10::DeviceIndex device) const {
  const int count = device_count_.load();
  TORCH_CHECK(device >= 0 && (!initialized_.load() || device < count), "Invalid device argument ", device,
              ": tensorpager serves the ", count, " CUDA device(s) PyTorch sees");
}

caching_allocator& cuda_adapter::allocator_for(c10::DeviceIndex device) {
  if (caching_allocator* a = opened(device)) return *a;
  const std::size_t i = index_of(device);
  if (i >= max_devices) throw invalid_argument("tensorpager: CUDA device index " + std::to_string(i) + " out of range");
  std::lock_guard lock(open_mutex_);
  if (caching_allocator* a = allocators_[i].load(std::memory_order_acquire)) return *a;
  auto state = std::make_unique<device_state>();
  state->dev = platform_->open_device(device);
  state->total_bytes = state->dev->memory().total_bytes;
  caching_allocator::options opts;
  if (budget_override_) {
    opts.budget = *budget_override_;
  } else if (config_.budget && config_.budget->resolvable_now()) {  // a peak ratio: the runtime sets it
    opts.budget = config_.budget->resolve_for_device(state->total_bytes, "CUDA device " + std::to_string(i));
  }
  if (config_.max_split_size) opts.max_split_size = *config_.max_split_size;
  opts.expandable_segments = config_.expandable_segments && vmm_usable(*state->dev, i);
  state->allocator = std::make_unique<caching_allocator>(*state->dev, opts);
  state->tracer.adapter = this;
  state->tracer.device = device;
  state->allocator->set_segment_listener(&state->tracer);
  caching_allocator* a = state->allocator.get();
  states_[i] = std::move(state);
  if (event_log_ != nullptr) attach_recorder(i);
  allocators_[i].store(a, std::memory_order_release);
  std::size_t limit = device_limit_.load();
  while (limit < i + 1 && !device_limit_.compare_exchange_weak(limit, i + 1)) {
  }
  return *a;
}

cuda_adapter::device_state& cuda_adapter::state_of(c10::DeviceIndex device) {
  std::lock_guard lock(open_mutex_);
  return *states_[index_of(device)];
}

runtime_resources cuda_adapter::runtime_resources_now() {
  const auto d = static_cast<c10::DeviceIndex>(platform_->current_device());
  caching_allocator& a = allocator_for(d);
  const stream_id compute = platform_->current_stream(d);
  std::lock_guard lock(open_mutex_);
  device_state& state = *states_[index_of(d)];
  if (!state.host) {
    pinned_host_pool::options o;
    o.host_budget = config_.host_budget;
    o.fallback = config_.host_fallback == host_fallback_mode::pageable ? host_fallback::pageable : host_fallback::error;
    state.host = std::make_unique<pinned_host_pool>(*state.dev, o);
  }
  runtime_resources res{*state.dev, a, *state.host, clock_, compute, /*host_synchronous=*/false, d};
  // Note [Restores allocate for the tensor's device and stream] in runtime_host.hpp.
  res.allocate_on = [this, d](const device_request& r) {
    return allocate_on(d, r.bytes, to_cuda_stream(r.stream), r.life, r.may_reclaim);
  };
  res.current_stream = [this, d] { return platform_->current_stream(d); };
  return res;
}

std::size_t cuda_adapter::total_bytes(c10::DeviceIndex device) {
  allocator_for(device);
  return state_of(device).total_bytes;
}

allocator_stats cuda_adapter::unopened_stats() {
  allocator_stats s;
  s.max_split_size = config_.max_split_size ? static_cast<std::int64_t>(*config_.max_split_size) : -1;
  // A share of the device has no size until the device is opened; a share
  // of the peak none until the first step.
  std::optional<std::size_t> budget;
  {
    std::lock_guard lock(open_mutex_);
    if (budget_override_) {
      budget = *budget_override_;
    } else if (config_.budget && config_.budget->is_bytes()) {
      budget = config_.budget->resolve(0);
    }
  }
  s.budget = budget ? static_cast<std::int64_t>(*budget) : -1;
  return s;
}

// --- allocation -------------------------------------------------------------------

void* cuda_adapter::allocate_on(c10::DeviceIndex device, std::size_t n, cudaStream_t stream, lifetime life,
                                bool may_reclaim) {
  const platform_device_guard guard(*platform_, device);  // Note [Device guards]
  // Through a pointer: a reference bound to the call's result is what GCC 13's
  // -Wdangling-reference flags (the lambda is a temporary argument).
  caching_allocator& a = *with_c10_errors([&] { return &allocator_for(device); });
  void* ptr = nullptr;
  try {
    ptr = may_reclaim ? a.allocate(n, to_stream_id(stream), life) : a.try_allocate(n, to_stream_id(stream), life);
  } catch (const out_of_memory& e) {
    notify_oom(device, n);
    const allocator_stats s = a.stats();
    c10::reportOutOfMemoryToProfiler(static_cast<std::int64_t>(n),
                                     static_cast<std::size_t>(s.allocated_bytes.all().current),
                                     static_cast<std::size_t>(s.reserved_bytes.all().current),
                                     c10::Device(c10::DeviceType::CUDA, device));
    C10_THROW_ERROR(OutOfMemoryError, e.what());
  } catch (const error& e) {
    C10_THROW_ERROR(Error, e.what());
  }
  if (ptr == nullptr) return nullptr;
  if (c10::memoryProfilingEnabled()) {
    const allocator_stats s = a.stats();
    c10::reportMemoryUsageToProfiler(ptr, static_cast<std::int64_t>(a.allocation_size(ptr)),
                                     static_cast<std::size_t>(s.allocated_bytes.all().current),
                                     static_cast<std::size_t>(s.reserved_bytes.all().current),
                                     c10::Device(c10::DeviceType::CUDA, device));
  }
  if (has_trackers_.load(std::memory_order_relaxed)) {
    trace(TraceEntry::ALLOC, device, reinterpret_cast<std::uintptr_t>(ptr), a.allocation_size(ptr), stream);
  }
  return ptr;
}

c10::DataPtr cuda_adapter::allocate(std::size_t n) {
  const auto device = static_cast<c10::DeviceIndex>(platform_->current_device());
  void* ptr = allocate_on(device, n, to_cuda_stream(platform_->current_stream(device)));
  return {ptr, ptr, &cuda_adapter::free_ptr, c10::Device(c10::DeviceType::CUDA, device)};
}

void* cuda_adapter::raw_alloc(std::size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const auto device = static_cast<c10::DeviceIndex>(platform_->current_device());
  return allocate_on(device, nbytes, to_cuda_stream(platform_->current_stream(device)));
}

void* cuda_adapter::raw_alloc_with_stream(std::size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0) return nullptr;
  // As PyTorch's: the stream is taken to be one of the current device.
  return allocate_on(static_cast<c10::DeviceIndex>(platform_->current_device()), nbytes, stream);
}

std::optional<std::pair<c10::DeviceIndex, std::size_t>> cuda_adapter::owner_of(const void* ptr) const {
  const std::size_t limit = device_limit_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < limit; ++i) {
    caching_allocator* a = allocators_[i].load(std::memory_order_acquire);
    if (a == nullptr) continue;
    if (const std::size_t size = a->allocation_size(ptr); size != 0) {
      return std::make_pair(static_cast<c10::DeviceIndex>(i), size);
    }
  }
  return std::nullopt;
}

void cuda_adapter::free_anywhere(void* ptr) {
  const auto owner = owner_of(ptr);
  if (!owner) throw invalid_argument("tensorpager: freeing a CUDA pointer that tensorpager did not allocate");
  const auto [device, size] = *owner;
  caching_allocator& a = *opened(device);
  if (has_trackers_.load(std::memory_order_relaxed)) {
    trace(TraceEntry::FREE_REQUESTED, device, reinterpret_cast<std::uintptr_t>(ptr), size, nullptr);
  }
  if (cross_device_count_.load(std::memory_order_acquire) != 0) settle_cross_device_uses(device, a, ptr);
  a.deallocate(ptr);
  if (c10::memoryProfilingEnabled()) {
    const allocator_stats s = a.stats();
    c10::reportMemoryUsageToProfiler(ptr, -static_cast<std::int64_t>(size),
                                     static_cast<std::size_t>(s.allocated_bytes.all().current),
                                     static_cast<std::size_t>(s.reserved_bytes.all().current),
                                     c10::Device(c10::DeviceType::CUDA, device));
  }
  // enable(false) asks for no caching: give freed memory back at once.
  if (!enabled_.load(std::memory_order_relaxed)) a.empty_cache();
}

void cuda_adapter::free_ptr(void* ptr) noexcept {
  if (ptr == nullptr) return;
  try {
    if (cuda_adapter* a = installed_adapter().load()) {
      a->free_anywhere(ptr);
      return;
    }
    std::fprintf(stderr, "tensorpager: freeing CUDA pointer %p with no adapter installed; ignored\n", ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tensorpager: freeing CUDA pointer %p failed: %s\n", ptr, e.what());
  }
}

void cuda_adapter::raw_delete(void* ptr) {
  if (ptr == nullptr) return;
  with_c10_errors([&] { free_anywhere(ptr); });
}

c10::DeleterFnPtr cuda_adapter::raw_deleter() const { return &cuda_adapter::free_ptr; }

// --- copies -----------------------------------------------------------------------

void cuda_adapter::copy_data(void* dest, const void* src, std::size_t count) const {
  // PyTorch's is a synchronous cudaMemcpy on the legacy default stream: the
  // same through the device that holds src.
  const auto owner = owner_of(src);
  TORCH_CHECK(owner.has_value(), "tensorpager: copy_data from ", src, ", which tensorpager did not allocate");
  device& dev = opened(owner->first)->dev();
  with_c10_errors([&] {
    dev.copy_async(dest, src, count, default_stream);
    dev.synchronize(default_stream);
  });
}

cudaError_t cuda_adapter::memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, std::size_t count,
                                      cudaStream_t stream, bool p2p_enabled) {
  // PyTorch calls this with the device of `stream` current (the source's).
  // Mapped memory (expandable segments, the default) is reachable from
  // another device only with peer access, which enablePeerAccess grants on
  // every mapping (Note [Peers of mapped memory] in
  // device/cuda/cuda_device_vmm.cpp); without it, a peer copy, as PyTorch's
  // allocator does.
  with_c10_errors([&] {
    if (p2p_enabled || srcDevice == dstDevice) {
      const auto current = static_cast<c10::DeviceIndex>(platform_->current_device());
      allocator_for(current).dev().copy_async(dst, src, count, to_stream_id(stream));
    } else {
      platform_->copy_to_peer_async(allocator_for(static_cast<c10::DeviceIndex>(srcDevice)).dev(), dst,
                                    allocator_for(static_cast<c10::DeviceIndex>(dstDevice)).dev(), src, count,
                                    to_stream_id(stream));
    }
  });
  return cudaSuccess;
}

void cuda_adapter::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  with_c10_errors([&] {
    device& accessor = allocator_for(dev).dev();
    device& owner = allocator_for(dev_to_access).dev();
    platform_->enable_peer_access(accessor, owner);
  });
}

}  // namespace tp::hooks
