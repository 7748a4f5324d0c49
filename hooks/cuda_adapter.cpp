// cuda_adapter, the allocating half: installation, devices, allocation and
// freeing, streams, copies. Statistics, snapshots, budgets and observers are
// in cuda_adapter_inspection.cpp; the unsupported features in
// cuda_adapter_unsupported.cpp.
//
// Note [Two CUDA runtimes]
// tp_device_cuda links the static CUDA runtime (Note [No link against
// libcuda] in device/cuda/driver_api.hpp) while PyTorch uses the shared one.
// Both attach to the device's primary context, so memory, streams and events
// made by either are valid in the other: a cudaStream_t from PyTorch is a
// CUstream of the primary context, which is what tp::cuda_device receives as
// a stream_id. The few runtime calls made here directly (copy_data,
// memcpyAsync, enablePeerAccess) go to the static runtime too, and
// tensorpager._C hides its copy's symbols (--exclude-libs) so neither runtime
// interposes on the other. Peer access is a property of the context, so
// enabling it here enables it for PyTorch's kernels as well.

#include "hooks/cuda_adapter.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <string>

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include "core/errors.hpp"
#include "hooks/c10_errors.hpp"

namespace tp::hooks {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;

/// The installed adapter, for the deleter of every DataPtr it made.
std::atomic<cuda_adapter*>& installed_adapter() {
  static auto* a = new std::atomic<cuda_adapter*>(nullptr);  // leaked: deleters run at exit
  return *a;
}

/// The priority of c10::SetAllocator; see install_priority in cpu_adapter.cpp.
constexpr std::uint8_t install_priority = std::numeric_limits<std::uint8_t>::max();

stream_id to_stream_id(cudaStream_t s) { return stream_id{reinterpret_cast<std::uintptr_t>(s)}; }

std::size_t index_of(c10::DeviceIndex device) {
  if (device < 0) throw invalid_argument("tensorpager: negative CUDA device index " + std::to_string(device));
  return static_cast<std::size_t>(device);
}

}  // namespace

cuda_adapter::cuda_adapter(const config& cfg) : config_(cfg) {}

cuda_adapter& cuda_adapter::create(const config& cfg) {
  return *new cuda_adapter(cfg);  // intentionally leaked: Note [CUDA adapter installation]
}

void cuda_adapter::install() {
  namespace cca = c10::cuda::CUDACachingAllocator;
  cca::CUDAAllocator* current = cca::get();
  if (current == this) return;
  if (cuda_device::device_count() == 0) {
    throw config_error("tensorpager: device:cuda, but this process sees no CUDA device (no driver, no GPU, "
                       "or CUDA_VISIBLE_DEVICES hides them); use device:cpu for the simulated device");
  }
  if (current != nullptr && current->initialized()) {
    const int count = c10::cuda::device_count();
    for (c10::DeviceIndex d = 0; d < count; ++d) {
      const auto reserved = current->getDeviceStats(d).reserved_bytes[0].current;
      if (reserved > 0) {
        throw config_error("tensorpager: cannot install on CUDA: PyTorch's allocator ('" + current->name() +
                           "') already holds " + std::to_string(reserved) + " bytes on cuda:" +
                           std::to_string(d) + ". Install before the first CUDA tensor (import tensorpager "
                           "before using torch.cuda, or set PYTORCH_CUDA_ALLOC_CONF=backend:tensorpager)");
      }
    }
    // PyTorch initialised CUDA already and will not call init() again.
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

caching_allocator& cuda_adapter::allocator_for(c10::DeviceIndex device) {
  if (caching_allocator* a = opened(device)) return *a;
  const std::size_t i = index_of(device);
  if (i >= max_devices) throw invalid_argument("tensorpager: CUDA device index " + std::to_string(i) + " out of range");
  std::lock_guard lock(open_mutex_);
  if (caching_allocator* a = allocators_[i].load(std::memory_order_acquire)) return *a;
  auto state = std::make_unique<device_state>();
  state->device = cuda_device::open(device);
  state->total_bytes = state->device->memory().total_bytes;
  caching_allocator::options opts;
  if (budget_override_) {
    opts.budget = *budget_override_;
  } else if (config_.budget) {
    opts.budget = config_.budget->resolve_for_device(state->total_bytes, "CUDA device " + std::to_string(i));
  }
  if (config_.max_split_size) opts.max_split_size = *config_.max_split_size;
  state->allocator = std::make_unique<caching_allocator>(*state->device, opts);
  caching_allocator* a = state->allocator.get();
  states_[i] = std::move(state);
  if (event_log_ != nullptr) attach_recorder(i);
  allocators_[i].store(a, std::memory_order_release);
  std::size_t limit = device_limit_.load();
  while (limit < i + 1 && !device_limit_.compare_exchange_weak(limit, i + 1)) {
  }
  return *a;
}

runtime_resources cuda_adapter::runtime_resources_now() {
  const c10::DeviceIndex d = c10::cuda::current_device();
  caching_allocator& a = allocator_for(d);
  std::lock_guard lock(open_mutex_);
  device_state& state = *states_[index_of(d)];
  if (!state.host) {
    pinned_host_pool::options o;
    o.host_budget = config_.host_budget;
    o.fallback = config_.host_fallback == host_fallback_mode::pageable ? host_fallback::pageable : host_fallback::error;
    state.host = std::make_unique<pinned_host_pool>(*state.device, o);
  }
  return runtime_resources{*state.device, a, *state.host, clock_,
                           to_stream_id(c10::cuda::getCurrentCUDAStream(d).stream()), /*host_synchronous=*/false, d};
}

std::size_t cuda_adapter::total_bytes(c10::DeviceIndex device) {
  allocator_for(device);
  std::lock_guard lock(open_mutex_);
  return states_[index_of(device)]->total_bytes;
}

allocator_stats cuda_adapter::unopened_stats() {
  allocator_stats s;
  s.max_split_size = config_.max_split_size ? static_cast<std::int64_t>(*config_.max_split_size) : -1;
  // A ratio budget has no size until the device is opened.
  std::optional<std::size_t> budget;
  {
    std::lock_guard lock(open_mutex_);
    if (budget_override_) {
      budget = *budget_override_;
    } else if (config_.budget && !config_.budget->is_ratio()) {
      budget = config_.budget->resolve(0);
    }
  }
  s.budget = budget ? static_cast<std::int64_t>(*budget) : -1;
  return s;
}

// --- allocation -------------------------------------------------------------------

void* cuda_adapter::allocate_on(c10::DeviceIndex device, std::size_t n, cudaStream_t stream) {
  caching_allocator& a = with_c10_errors([&]() -> caching_allocator& { return allocator_for(device); });
  void* ptr = nullptr;
  try {
    ptr = a.allocate(n, to_stream_id(stream));
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
  const c10::DeviceIndex device = c10::cuda::current_device();
  void* ptr = allocate_on(device, n, c10::cuda::getCurrentCUDAStream(device).stream());
  return {ptr, ptr, &cuda_adapter::free_ptr, c10::Device(c10::DeviceType::CUDA, device)};
}

void* cuda_adapter::raw_alloc(std::size_t nbytes) {
  const c10::DeviceIndex device = c10::cuda::current_device();
  return allocate_on(device, nbytes, c10::cuda::getCurrentCUDAStream(device).stream());
}

void* cuda_adapter::raw_alloc_with_stream(std::size_t nbytes, cudaStream_t stream) {
  return allocate_on(c10::cuda::current_device(), nbytes, stream);
}

void cuda_adapter::free_anywhere(void* ptr) {
  const std::size_t limit = device_limit_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < limit; ++i) {
    caching_allocator* a = allocators_[i].load(std::memory_order_acquire);
    if (a == nullptr) continue;
    const std::size_t size = a->allocation_size(ptr);
    if (size == 0) continue;
    const auto device = static_cast<c10::DeviceIndex>(i);
    if (has_trackers_.load(std::memory_order_relaxed)) {
      trace(TraceEntry::FREE_REQUESTED, device, reinterpret_cast<std::uintptr_t>(ptr), size, nullptr);
    }
    a->deallocate(ptr);
    if (c10::memoryProfilingEnabled()) {
      const allocator_stats s = a->stats();
      c10::reportMemoryUsageToProfiler(ptr, -static_cast<std::int64_t>(size),
                                       static_cast<std::size_t>(s.allocated_bytes.all().current),
                                       static_cast<std::size_t>(s.reserved_bytes.all().current),
                                       c10::Device(c10::DeviceType::CUDA, device));
    }
    // enable(false) asks for no caching: give freed memory back at once.
    if (!enabled_.load(std::memory_order_relaxed)) a->empty_cache();
    return;
  }
  throw invalid_argument("tensorpager: freeing a CUDA pointer that tensorpager did not allocate");
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

void cuda_adapter::copy_data(void* dest, const void* src, std::size_t count) const {
  C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
}

cudaError_t cuda_adapter::memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice,
                                      std::size_t count, cudaStream_t stream, bool p2p_enabled) {
  // As PyTorch's allocator: segments come from cudaMalloc, so a plain copy
  // works between devices with peer access; without it, ask for a peer copy.
  if (p2p_enabled || dstDevice == srcDevice) {
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  }
  return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
}

void cuda_adapter::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  c10::cuda::CUDAGuard guard(dev);
  const cudaError_t err = cudaDeviceEnablePeerAccess(dev_to_access, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // clear the sticky-until-read error
  } else {
    C10_CUDA_CHECK(err);
  }
}

void cuda_adapter::recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) {
  // Empty tensors have no memory; memory from elsewhere (allocated before
  // install, or shared by another process) is not ours to track.
  if (ptr.get() == nullptr || ptr.get_deleter() != &cuda_adapter::free_ptr) return;
  const c10::DeviceIndex device = ptr.device().index();
  TORCH_CHECK_NOT_IMPLEMENTED(stream.device_index() == device,
                              "tensorpager does not support record_stream with a stream of another device "
                              "(tensor on cuda:", device, ", stream on cuda:", stream.device_index(),
                              "); unset backend:tensorpager in PYTORCH_CUDA_ALLOC_CONF to use PyTorch's allocator");
  caching_allocator* a = opened(device);
  TORCH_CHECK(a != nullptr, "tensorpager: record_stream on cuda:", device, ", which it never allocated on");
  with_c10_errors([&] { a->record_stream(ptr.get(), to_stream_id(stream.stream())); });
}

}  // namespace tp::hooks
