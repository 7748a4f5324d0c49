#pragma once
// fake_cuda_platform: a cuda_platform without CUDA, for the CPU tests of
// cuda_adapter (cuda_adapter_review_test.cpp). Everything but the CUDA calls
// themselves is the adapter's real code.
//
// The devices share one simulated_device, as CUDA's devices share one driver:
// a stream or event handle is unique in the process, a copy may cross devices
// (unified addressing), and a stream may wait on an event of another device
// (cuStreamWaitEvent). Each fake_cuda_device checks the rules CUDA enforces
// per context: an event is recorded only on a stream of its own device
// (cuEventRecord), and copies and waits are enqueued on the device's own
// streams. The platform keeps PyTorch's current device and streams and counts
// every call made through it, so tests can say "no CUDA call happened".

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.hpp"
#include "core/errors.hpp"
#include "device/simulated_device.hpp"
#include "hooks/cuda_platform.hpp"

namespace tp::hooks::testing {

class fake_cuda_platform;

/// Stream handles as the adapter and torch see them, and the simulated
/// device's ids behind them. torch takes a stream handle it did not create
/// for a pointer (c10::cuda::getStreamFromExternal), and tells it from its
/// own stream ids by an even value, so the fake's handles are the simulated
/// ids shifted left; 0, the default stream, stays 0.
inline stream_id to_handle(stream_id sim) { return stream_id{to_underlying(sim) << 4}; }
inline stream_id to_sim(stream_id handle) { return stream_id{to_underlying(handle) >> 4}; }

/// One device of a fake_cuda_platform. Thread-safety: as simulated_device.
class fake_cuda_device final : public device {
 public:
  fake_cuda_device(fake_cuda_platform& platform, simulated_device& sim, int ordinal)
      : platform_(platform), sim_(sim), ordinal_(ordinal) {}

  int ordinal() const { return ordinal_; }
  /// PyTorch's current device at each try_allocate, in order.
  std::vector<int> current_device_at_allocation() const {
    std::lock_guard lock(mutex_);
    return current_at_allocation_;
  }
  /// Streams this device created.
  bool owns_stream(stream_id s) const {
    std::lock_guard lock(mutex_);
    return s == default_stream || streams_.count(s) != 0;
  }

  std::string name() const override { return "fake CUDA device " + std::to_string(ordinal_); }
  void* try_allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    count();
    sim_.deallocate(ptr, bytes);
  }
  std::size_t granularity() const override { return count(), sim_.granularity(); }
  void* reserve(std::size_t bytes) override { return count(), sim_.reserve(bytes); }
  void release(void* base, std::size_t bytes) noexcept override {
    count();
    sim_.release(base, bytes);
  }
  bool try_map(void* ptr, std::size_t bytes) override {
    count();
    if (vmm_broken_) throw cuda_error("cuMemCreate failed: CUDA_ERROR_NOT_SUPPORTED (faked)");
    return sim_.try_map(ptr, bytes);
  }
  void unmap(void* ptr, std::size_t bytes) noexcept override {
    count();
    sim_.unmap(ptr, bytes);
  }
  void* try_allocate_host(std::size_t bytes) override { return count(), sim_.try_allocate_host(bytes); }
  void deallocate_host(void* ptr, std::size_t bytes) noexcept override {
    count();
    sim_.deallocate_host(ptr, bytes);
  }
  stream_id create_stream() override {
    count();
    const stream_id s = to_handle(sim_.create_stream());
    std::lock_guard lock(mutex_);
    streams_.insert(s);
    return s;
  }
  void destroy_stream(stream_id stream) noexcept override {
    count();
    sim_.destroy_stream(to_sim(stream));
  }
  bool is_stream(stream_id stream) const override { return count(), sim_.is_stream(to_sim(stream)); }
  void synchronize(stream_id stream) override {
    require_own_stream(stream, "cuStreamSynchronize");
    sim_.synchronize(to_sim(stream));
  }
  void synchronize_device() override {
    count();
    sim_.synchronize_device();
  }
  event_id create_event() override {
    count();
    const event_id e = sim_.create_event();
    std::lock_guard lock(mutex_);
    events_.insert(e);
    return e;
  }
  void destroy_event(event_id event) noexcept override {
    count();
    sim_.destroy_event(event);
  }
  void record_event(event_id event, stream_id stream) override {
    require_own_stream(stream, "cuEventRecord");
    if (faulted_) throw cuda_error("cuEventRecord failed: CUDA_ERROR_ILLEGAL_ADDRESS (a sticky fault, faked)");
    {
      std::lock_guard lock(mutex_);
      if (events_.count(event) == 0) {
        throw cuda_error("cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE (the event is not of fake device " +
                         std::to_string(ordinal_) + ")");
      }
    }
    sim_.record_event(event, to_sim(stream));
  }
  bool query_event(event_id event) override { return count(), sim_.query_event(event); }
  void synchronize_event(event_id event) override {
    count();
    sim_.synchronize_event(event);
  }
  void stream_wait_event(stream_id stream, event_id event) override {
    require_own_stream(stream, "cuStreamWaitEvent");  // the event may be any device's
    sim_.stream_wait_event(to_sim(stream), event);
  }
  void copy_async(void* dst, const void* src, std::size_t bytes, stream_id stream) override {
    require_own_stream(stream, "cuMemcpyAsync");
    sim_.copy_async(dst, src, bytes, to_sim(stream));
  }
  memory_info memory() const override { return count(), sim_.memory(); }

  /// From now on, every event record fails as after a sticky device fault.
  void fault() { faulted_ = true; }
  /// From now on, mapping memory fails with an error other than out of
  /// memory, as a virtual-memory call may in a sandboxed runtime.
  void break_vmm() { vmm_broken_ = true; }

 private:
  std::uint64_t count() const;
  void require_own_stream(stream_id s, const char* call) const {
    count();
    if (!owns_stream(s)) {
      throw cuda_error(std::string(call) + " failed: CUDA_ERROR_INVALID_HANDLE (the stream is not of fake device " +
                       std::to_string(ordinal_) + ")");
    }
  }

  fake_cuda_platform& platform_;
  simulated_device& sim_;
  const int ordinal_;
  std::atomic<bool> faulted_{false};
  std::atomic<bool> vmm_broken_{false};
  mutable std::mutex mutex_;
  std::set<stream_id> streams_;
  std::set<event_id> events_;
  std::vector<int> current_at_allocation_;
};

/// A cuda_platform over `devices` fake devices. Single-threaded tests: the
/// current device and streams are the platform's, not per thread.
class fake_cuda_platform final : public cuda_platform {
 public:
  explicit fake_cuda_platform(int devices, std::size_t capacity = std::size_t{1} << 30)
      : sim_(sim_options(capacity), clock_), device_count_(devices), streams_(static_cast<std::size_t>(devices)) {}

  // --- cuda_platform ---------------------------------------------------------------
  int current_device() override { return ++calls_, current_; }
  void set_device(int device) override {
    ++calls_;
    ++set_device_calls_;
    check(device);
    current_ = device;
    contexts_.at(static_cast<std::size_t>(device)) = true;  // cudaSetDevice creates the primary context
  }
  void restore_device(int device) override {
    ++calls_;
    ++set_device_calls_;
    check(device);
    current_ = device;  // MaybeSetDevice: no context where there is none
  }
  stream_id current_stream(int device) override {
    ++calls_;
    check(device);
    return streams_[static_cast<std::size_t>(device)];
  }
  int device_count() override { return ++calls_, device_count_; }
  std::unique_ptr<device> open_device(int device) override {
    ++calls_;
    if (device < 0 || device >= device_count_) {
      throw cuda_error("no CUDA device: fake platform has " + std::to_string(device_count_) + " device(s), not " +
                       std::to_string(device));
    }
    contexts_.at(static_cast<std::size_t>(device)) = true;  // the device retains its primary context
    auto d = std::make_unique<fake_cuda_device>(*this, sim_, device);
    opened_.push_back(d.get());
    return d;
  }
  void enable_peer_access(device& accessor, device& owner) override {
    ++calls_;
    peers_.emplace_back(static_cast<fake_cuda_device&>(accessor).ordinal(),
                        static_cast<fake_cuda_device&>(owner).ordinal());
  }
  void copy_to_peer_async(device& src_device, void* dst, device& dst_device, const void* src, std::size_t bytes,
                          stream_id stream) override {
    auto& from = static_cast<fake_cuda_device&>(src_device);
    peer_copies_.emplace_back(from.ordinal(), static_cast<fake_cuda_device&>(dst_device).ordinal());
    from.copy_async(dst, src, bytes, stream);  // checks that `stream` is the source device's
  }
  std::uint64_t driver_calls() const override { return calls_.load(); }

  // --- for tests ------------------------------------------------------------------
  /// Makes `stream` (a stream of `device`, or 0) PyTorch's current stream of device.
  void set_current_stream(int device, stream_id stream) { streams_[static_cast<std::size_t>(device)] = stream; }
  void set_current_device(int device) { current_ = device; }
  /// Calls of any kind made through the platform and its devices.
  std::uint64_t calls() const { return calls_.load(); }
  std::uint64_t set_device_calls() const { return set_device_calls_.load(); }
  /// Whether anything made `device` a primary context (set_device, open_device).
  bool has_context(int device) const { return contexts_.at(static_cast<std::size_t>(device)); }
  /// The devices opened so far, in order (owned by the adapter).
  const std::vector<fake_cuda_device*>& opened() const { return opened_; }
  fake_cuda_device& opened_device(int ordinal) const {
    for (fake_cuda_device* d : opened_) {
      if (d->ordinal() == ordinal) return *d;
    }
    throw std::logic_error("fake device " + std::to_string(ordinal) + " was not opened");
  }
  const std::vector<std::pair<int, int>>& peer_access() const { return peers_; }
  /// (source, destination) devices of each copy_to_peer_async, in order.
  const std::vector<std::pair<int, int>>& peer_copies() const { return peer_copies_; }
  simulated_device& sim() { return sim_; }
  /// Holds (or releases) the simulated stream behind a handle: work queued
  /// on it does not run until released.
  void hold(stream_id handle) { sim_.hold_stream(to_sim(handle)); }
  void release(stream_id handle) { sim_.release_stream(to_sim(handle)); }
  void count_device_call() { ++calls_; }

 private:
  static simulated_device::options sim_options(std::size_t capacity) {
    simulated_device::options o;
    o.capacity_bytes = capacity;
    return o;
  }
  void check(int device) const {
    if (device < 0 || device >= device_count_) throw cuda_error("invalid device ordinal " + std::to_string(device));
  }

  manual_clock clock_;
  simulated_device sim_;
  const int device_count_;
  int current_ = 0;
  std::vector<stream_id> streams_;
  std::vector<bool> contexts_ = std::vector<bool>(8, false);
  std::vector<fake_cuda_device*> opened_;
  std::vector<std::pair<int, int>> peers_;
  std::vector<std::pair<int, int>> peer_copies_;
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<std::uint64_t> set_device_calls_{0};
};

inline std::uint64_t fake_cuda_device::count() const {
  platform_.count_device_call();
  return 0;
}

inline void* fake_cuda_device::try_allocate(std::size_t bytes) {
  count();
  {
    std::lock_guard lock(mutex_);
    current_at_allocation_.push_back(platform_.current_device());
  }
  return sim_.try_allocate(bytes);
}

}  // namespace tp::hooks::testing
