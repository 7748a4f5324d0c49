// The inspection and configuration half of cuda_adapter: statistics,
// snapshots, budgets and fractions, out-of-memory observers, and the
// allocator_control interface. Allocation and freeing are in cuda_adapter.cpp;
// trace trackers in cuda_adapter_streams.cpp.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>


#include "core/errors.hpp"
#include "hooks/c10_conversions.hpp"
#include "hooks/c10_errors.hpp"
#include "hooks/cuda_adapter.hpp"

namespace tp::hooks {

using c10::CachingDeviceAllocator::TraceEntry;

// --- errors, observers, trackers -------------------------------------------------

void cuda_adapter::notify_oom(c10::DeviceIndex device, std::size_t requested) {
  std::vector<OutOfMemoryObserver> observers;
  {
    std::lock_guard lock(observers_mutex_);
    observers = oom_observers_;
  }
  if (observers.empty() && !has_trackers_.load()) return;
  caching_allocator* a = opened(device);
  const memory_info m = a != nullptr ? a->dev().memory() : memory_info{};
  // PyTorch passes the request, the device's limit and its free memory.
  const std::optional<std::size_t> budget = a != nullptr ? a->budget() : std::nullopt;
  for (const auto& observe : observers) observe(device, requested, budget.value_or(m.total_bytes), m.free_bytes);
  // For OOM entries PyTorch puts the device's free bytes where the address goes.
  if (has_trackers_.load()) trace(TraceEntry::OOM, device, m.free_bytes, requested, nullptr);
}

void cuda_adapter::attachOutOfMemoryObserver(OutOfMemoryObserver observer) {
  std::lock_guard lock(observers_mutex_);
  oom_observers_.push_back(std::move(observer));
}

bool cuda_adapter::isHistoryEnabled() { return false; }

std::string cuda_adapter::name() { return "tensorpager"; }

// --- state and configuration ------------------------------------------------------

bool cuda_adapter::initialized() { return initialized_.load(); }

void cuda_adapter::init(int device_count) {
  TORCH_CHECK(device_count >= 0 && static_cast<std::size_t>(device_count) <= max_devices,
              "tensorpager: cannot serve ", device_count, " CUDA devices (at most ", max_devices, ")");
  device_count_.store(device_count);
  initialized_.store(true);
}

void cuda_adapter::enable(bool value) { enabled_.store(value); }

bool cuda_adapter::isEnabled() const { return enabled_.load(); }

double cuda_adapter::getMemoryFraction(c10::DeviceIndex device) {
  check_device(device);
  return with_c10_errors([&] {
    const std::optional<std::size_t> budget = allocator_for(device).budget();
    if (!budget) return 1.0;
    return static_cast<double>(*budget) / static_cast<double>(total_bytes(device));
  });
}

void cuda_adapter::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  check_device(device);
  TORCH_CHECK_VALUE(fraction >= 0.0 && fraction <= 1.0, "invalid fraction: ", fraction,
                    ". Please set within [0, 1].");
  const platform_device_guard guard(*platform_, device);  // Note [Device guards] in cuda_adapter.cpp
  with_c10_errors([&] {
    const double bytes = std::floor(fraction * static_cast<double>(total_bytes(device)));
    allocator_for(device).set_budget(static_cast<std::size_t>(bytes));
  });
}

std::pair<std::size_t, std::size_t> cuda_adapter::getMemoryInfo(c10::DeviceIndex device) {
  check_device(device);
  const platform_device_guard guard(*platform_, device);
  return with_c10_errors([&] {
    const memory_info m = allocator_for(device).dev().memory();
    return std::make_pair(m.free_bytes, m.total_bytes);
  });
}

std::vector<cuda_adapter::StreamSegmentSize> cuda_adapter::getExpandableSegmentSizes(c10::DeviceIndex device) {
  // Mapped bytes per (stream, pool), as PyTorch reports its expandable
  // segments; a snapshot lists each mapped range (Note [Expandable segments]).
  std::vector<StreamSegmentSize> out;
  caching_allocator* a = opened(device);
  if (a == nullptr) return out;
  for (const segment_snapshot& seg : a->snapshot()) {
    if (!seg.expandable) continue;
    auto* stream = reinterpret_cast<cudaStream_t>(to_underlying(seg.stream));
    const bool small = seg.pool == pool_kind::small;
    const auto it = std::find_if(out.begin(), out.end(), [&](const StreamSegmentSize& s) {
      return s.stream == stream && s.is_small_pool == small;
    });
    if (it != out.end()) it->total_size += seg.total_size;
    else out.emplace_back(stream, small, seg.total_size);
  }
  return out;
}

void cuda_adapter::cacheInfo(c10::DeviceIndex device, std::size_t* largestBlock) {
  check_device(device);
  const platform_device_guard guard(*platform_, device);
  // cuDNN sizes its workspace by this: report what an allocation could get,
  // which the budget limits as much as the device does.
  with_c10_errors([&] {
    caching_allocator& a = allocator_for(device);
    if (*largestBlock == 0) {
      std::size_t headroom = a.dev().memory().free_bytes;
      if (const auto budget = a.budget()) {
        const auto reserved = static_cast<std::size_t>(a.stats().reserved_bytes.all().current);
        headroom = std::min(headroom, *budget > reserved ? *budget - reserved : 0);
      }
      *largestBlock = headroom;
    }
    *largestBlock = std::max(*largestBlock, a.largest_free_block());
  });
}

void* cuda_adapter::getBaseAllocation(void* ptr, std::size_t* size) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  const std::size_t limit = device_limit_.load();
  for (std::size_t i = 0; i < limit; ++i) {
    caching_allocator* a = allocators_[i].load();
    if (a == nullptr) continue;
    for (const segment_snapshot& seg : a->snapshot()) {
      if (address >= seg.address && address < seg.address + seg.total_size) {
        if (size != nullptr) *size = seg.total_size;
        return reinterpret_cast<void*>(seg.address);
      }
    }
  }
  TORCH_CHECK(false, "tensorpager: getBaseAllocation: ", ptr, " is not in any tensorpager segment");
}

// --- statistics and snapshots -----------------------------------------------------

c10::CachingDeviceAllocator::DeviceStats cuda_adapter::getDeviceStats(c10::DeviceIndex device) {
  check_device(device);
  caching_allocator* a = opened(device);
  return to_device_stats(a != nullptr ? a->stats() : unopened_stats());
}

void cuda_adapter::resetAccumulatedStats(c10::DeviceIndex device) {
  check_device(device);
  if (caching_allocator* a = opened(device)) a->reset_accumulated_stats();
}

void cuda_adapter::resetPeakStats(c10::DeviceIndex device) {
  check_device(device);
  if (caching_allocator* a = opened(device)) a->reset_peak_stats();
}

cuda_adapter::SnapshotInfo cuda_adapter::snapshot(c10::MempoolId_t mempool_id, bool /*include_traces*/) {
  SnapshotInfo out;
  const std::size_t limit = device_limit_.load();
  out.device_traces.resize(std::max(limit, static_cast<std::size_t>(std::max(device_count_.load(), 0))));
  // tensorpager has no private pools (CUDA graphs, MemPool): all is pool {0, 0}.
  if (mempool_id == c10::MempoolId_t{0, 0}) {
    for (std::size_t i = 0; i < limit; ++i) {
      caching_allocator* a = allocators_[i].load();
      if (a == nullptr) continue;
      for (const segment_snapshot& seg : a->snapshot()) {
        out.segments.push_back(to_segment_info(seg, static_cast<c10::DeviceIndex>(i)));
      }
    }
  }
  auto& meta = out.config_metadata;  // AllocatorConfigInfo as of torch 2.11
  meta.garbage_collection_threshold = 0.0;
  meta.max_split_size = config_.max_split_size.value_or(SIZE_MAX);
  meta.pinned_num_register_threads = 1;
  meta.expandable_segments = config_.expandable_segments;
  meta.release_lock_on_malloc = false;
  meta.pinned_use_host_register = false;
  meta.graph_capture_record_stream_reuse = false;
  meta.last_allocator_settings = "backend:tensorpager," + to_string(config_);
  return out;
}

// --- allocator_control -------------------------------------------------------------

std::string cuda_adapter::device_description() {
  // No CUDA call before a device is used: Note [No CUDA call before the
  // first allocation] in cuda_adapter.cpp.
  if (device_limit_.load() == 0) return "cuda, not used yet";
  const int device = platform_->current_device();
  caching_allocator* a = opened(static_cast<c10::DeviceIndex>(device));
  return "cuda:" + std::to_string(device) + (a != nullptr ? ", " + a->dev().name() : ", not used yet");
}

allocator_stats cuda_adapter::memory_stats() {
  caching_allocator* a = opened_current();
  return a != nullptr ? a->stats() : unopened_stats();
}

std::vector<segment_snapshot> cuda_adapter::segments() {
  caching_allocator* a = opened_current();
  return a != nullptr ? a->snapshot() : std::vector<segment_snapshot>{};
}

void cuda_adapter::change_budget(std::optional<std::size_t> bytes) {
  std::lock_guard lock(open_mutex_);
  if (bytes) {  // the same refusal as the budget key's (0 bytes, more than the device), before any change
    for (std::size_t i = 0; i < states_.size(); ++i) {
      if (states_[i]) (void)memory_budget{*bytes}.resolve_for_device(states_[i]->total_bytes, "CUDA device " + std::to_string(i));
    }
  }
  std::vector<std::pair<caching_allocator*, std::optional<std::size_t>>> changed;
  try {
    for (const auto& state : states_) {
      if (!state) continue;
      const std::optional<std::size_t> previous = state->allocator->budget();
      state->allocator->set_budget(bytes);
      changed.emplace_back(state->allocator.get(), previous);
    }
  } catch (...) {
    // All or nothing: put back the budgets already changed.
    for (auto& [a, previous] : changed) {
      try {
        a->set_budget(previous);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tensorpager: restoring a budget failed: %s\n", e.what());
      }
    }
    throw;
  }
  budget_override_ = bytes;
}

std::optional<std::size_t> cuda_adapter::budget_bytes() {
  if (caching_allocator* a = opened_current()) return a->budget();
  // Not used yet: a size is known without the device, a ratio needs it.
  const allocator_stats s = unopened_stats();
  if (s.budget >= 0) return static_cast<std::size_t>(s.budget);
  // A share of the peak caps nothing until its first step has run (Note
  // [Budget spellings]): no device to open for it.
  if (!config_.budget || !config_.budget->resolvable_now()) return std::nullopt;
  return allocator_for(static_cast<c10::DeviceIndex>(platform_->current_device())).budget();
}

std::optional<std::optional<std::size_t>> cuda_adapter::budget_if_known() {
  if (caching_allocator* a = opened_current()) return a->budget();
  const allocator_stats s = unopened_stats();
  if (s.budget >= 0) return static_cast<std::size_t>(s.budget);
  if (config_.budget && config_.budget->resolvable_now()) return std::nullopt;  // a share of the device
  return std::optional<std::size_t>{};  // none, or a share of the peak: no cap yet
}

void cuda_adapter::restore_configured_budget() {
  std::lock_guard lock(open_mutex_);
  budget_override_.reset();
  for (std::size_t i = 0; i < states_.size(); ++i) {
    if (!states_[i]) continue;
    std::optional<std::size_t> budget;
    if (config_.budget && config_.budget->resolvable_now()) {
      budget = config_.budget->resolve_for_device(states_[i]->total_bytes, "CUDA device " + std::to_string(i));
    }
    states_[i]->allocator->set_budget(budget);
  }
}

void cuda_adapter::release_cache() {
  const std::size_t limit = device_limit_.load();
  for (std::size_t i = 0; i < limit; ++i) {
    if (caching_allocator* a = allocators_[i].load()) a->empty_cache();
  }
}

void cuda_adapter::emptyCache(c10::MempoolId_t mempool_id) {
  // Only the default pool exists; other ids name nothing to release.
  if (mempool_id == c10::MempoolId_t{0, 0}) with_c10_errors([&] { release_cache(); });
}

void cuda_adapter::reset_peaks() {
  // Before the first allocation there is no peak to reset, and asking for the
  // current device would call CUDA (a ratio budget begins at import under
  // manage:activations: Note [No CUDA call before the first allocation]).
  const std::size_t limit = device_limit_.load();
  bool any = false;
  for (std::size_t i = 0; i < limit && !any; ++i) any = allocators_[i].load() != nullptr;
  if (!any) return;
  if (caching_allocator* a = opened_current()) a->reset_peak_stats();
}

// --- the timeline -----------------------------------------------------------------

void cuda_adapter::attach_event_log(profiler::event_log* log) {
  std::lock_guard lock(open_mutex_);
  event_log_ = log;
  for (std::size_t i = 0; i < max_devices; ++i) {
    if (states_[i] != nullptr) attach_recorder(i);
  }
}

void cuda_adapter::attach_recorder(std::size_t i) {
  device_state& state = *states_[i];
  if (event_log_ == nullptr) {
    state.allocator->set_log(nullptr);  // once it returns no record is on its way in
    state.recorder = nullptr;              // the log keeps it, and its records
    return;
  }
  // Note [Recording start] in profiler_glue.cpp.
  const auto device = static_cast<std::int16_t>(i);
  profiler::allocator_recorder& recorder = event_log_->open_allocator_recorder(device);
  event_log_->set_device_name(device, "cuda:" + std::to_string(i) + ", " + state.dev->name());
  const std::optional<std::size_t> budget = state.allocator->budget();
  event_log_->add_initial({device, state.allocator->snapshot(), budget ? static_cast<std::int64_t>(*budget) : -1});
  state.allocator->set_log(&recorder);
  state.recorder = &recorder;
}

}  // namespace tp::hooks
