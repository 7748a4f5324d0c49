#pragma once
// The device interface: everything the allocator and the runtime need from a
// GPU, and nothing more (mimalloc's prim.h habit). Two implementations:
// cuda_device (the only code that includes CUDA headers) and simulated_device
// (host memory, in-order streams, a bandwidth and latency model).
//
// Note [Stream and event handles]
// Streams and events are opaque integers. For CUDA they hold the cudaStream_t
// and cudaEvent_t values themselves, so a stream PyTorch created can be passed
// to the allocator without registering it first. stream_id{0} is the default
// (legacy) stream on every device.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace tp {

/// An opaque stream handle; see Note [Stream and event handles].
enum class stream_id : std::uintptr_t {};
/// An opaque event handle; see Note [Stream and event handles].
enum class event_id : std::uintptr_t {};

inline constexpr stream_id default_stream{0};

inline std::uintptr_t to_underlying(stream_id s) { return static_cast<std::uintptr_t>(s); }
inline std::uintptr_t to_underlying(event_id e) { return static_cast<std::uintptr_t>(e); }

/// Free and total device memory, as cudaMemGetInfo reports them.
struct memory_info {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
};

/// The contract between tensorpager and one GPU (or its simulation).
///
/// Thread-safety: every member may be called from any thread concurrently.
/// Streams: work enqueued on a stream runs in order; an event completes when
/// all work enqueued on its stream before the record has completed.
/// Errors: try_* members return nullptr/false when memory is exhausted; every
/// other failure throws tp::error (tp::cuda_error on CUDA,
/// tp::invalid_argument for an unknown stream or event).
class device {
 public:
  virtual ~device() = default;

  /// A short human-readable name ("simulated", "NVIDIA H200").
  virtual std::string name() const = 0;

  // --- plain device memory -------------------------------------------------

  /// Allocates bytes (> 0) of device memory, aligned to at least 256 bytes.
  /// Returns nullptr when the device has no room.
  virtual void* try_allocate(std::size_t bytes) = 0;
  /// Returns memory from try_allocate. bytes must equal the allocated size.
  /// Waits for the whole device first, as cudaFree does.
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;

  // --- virtual memory: reserve address space, map physical granules ---------

  /// The granule size of map/unmap, a power of two (2 MiB on current GPUs).
  virtual std::size_t granularity() const = 0;
  /// Reserves bytes (a multiple of granularity()) of address space with no
  /// physical memory behind it. Throws tp::error when address space runs out.
  virtual void* reserve(std::size_t bytes) = 0;
  /// Releases a reservation. Every granule in it must be unmapped.
  virtual void release(void* base, std::size_t bytes) noexcept = 0;
  /// Backs [ptr, ptr + bytes) with physical memory, readable and writable
  /// from this device. ptr and bytes are multiples of granularity() inside a
  /// reservation. Returns false, mapping nothing, when the device has no room.
  virtual bool try_map(void* ptr, std::size_t bytes) = 0;
  /// Returns the physical memory behind [ptr, ptr + bytes) to the device.
  /// The range must be idle: the caller has waited for every stream whose
  /// queued work uses it (Note [Giving memory back waits] in
  /// allocator/caching_allocator.hpp); unmap itself does not wait on CUDA.
  virtual void unmap(void* ptr, std::size_t bytes) noexcept = 0;

  // --- page-locked host memory ---------------------------------------------

  /// Allocates page-locked host memory usable by copy_async. Returns nullptr
  /// when the host cannot lock more memory. Slow (milliseconds on CUDA):
  /// callers cache it.
  virtual void* try_allocate_host(std::size_t bytes) = 0;
  virtual void deallocate_host(void* ptr, std::size_t bytes) noexcept = 0;

  // --- streams and events --------------------------------------------------

  virtual stream_id create_stream() = 0;
  /// Destroys a stream created by create_stream. Pending work still runs.
  virtual void destroy_stream(stream_id stream) noexcept = 0;
  /// True when stream names the default stream or a live stream of this device.
  virtual bool is_stream(stream_id stream) const = 0;
  /// Blocks until all work enqueued on stream so far has completed.
  virtual void synchronize(stream_id stream) = 0;
  /// Blocks until all work enqueued on every stream of this device so far,
  /// destroyed streams included, has completed (cudaDeviceSynchronize).
  virtual void synchronize_device() = 0;

  /// Creates an event. A never-recorded event counts as completed.
  virtual event_id create_event() = 0;
  virtual void destroy_event(event_id event) noexcept = 0;
  /// Marks the point in stream's work that event tracks (re-recording moves it).
  virtual void record_event(event_id event, stream_id stream) = 0;
  /// True when the work before the most recent record has completed.
  virtual bool query_event(event_id event) = 0;
  /// Blocks the host until query_event(event) would return true.
  virtual void synchronize_event(event_id event) = 0;
  /// Makes future work on stream wait for the event's current record, without
  /// blocking the host.
  virtual void stream_wait_event(stream_id stream, event_id event) = 0;

  // --- timing (Note [Copy cost model] in runtime/copy_cost_model.hpp) --------

  /// Creates an event that elapsed_ns can time, as create_event's otherwise.
  /// On CUDA such an event costs more to record: callers use it only where
  /// they time something. Destroyed with destroy_event.
  virtual event_id create_timing_event() { return create_event(); }
  /// The device time from start's most recent record to end's, in ns.
  /// Requires: both from create_timing_event, recorded, and complete
  /// (query_event). nullopt when this device keeps no such time (the
  /// default; a simulated device with no copy model; a driver without
  /// cuEventElapsedTime).
  virtual std::optional<std::int64_t> elapsed_ns(event_id /*start*/, event_id /*end*/) { return std::nullopt; }

  // --- copies --------------------------------------------------------------

  /// Enqueues a copy of bytes from src to dst on stream. Either side may be
  /// device memory or page-locked host memory from this device.
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, stream_id stream) = 0;

  // --- information ---------------------------------------------------------

  virtual memory_info memory() const = 0;
};

}  // namespace tp
