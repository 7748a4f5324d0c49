#pragma once
// What the budget runtime (budget_session.hpp) needs from the installed
// adapter: the device, the caching allocator and the pinned host pool of the
// current device, a clock, the stream tensors are used on now, and whether
// that "stream" is the host itself. Includes no torch.

#include <cstddef>
#include <functional>

#include "allocator/caching_allocator.hpp"
#include "allocator/pinned_host_pool.hpp"
#include "core/clock.hpp"
#include "device/device.hpp"

namespace tp::hooks {

/// The parts a tp::memory_runtime is built over. References stay valid for
/// the life of the process (adapters are never destroyed; Note [Adapters live
/// forever] in cpu_adapter.hpp).
/// An allocation for a restore or a move (runtime_resources::allocate_on).
struct device_request {
  std::size_t bytes = 0;
  stream_id stream{};
  /// Note [Long-lived placement] in allocator/caching_allocator.hpp.
  lifetime life = lifetime::transient;
  /// False: nullptr where the allocator would ask the reclaimer (a move
  /// that is made only when it costs no eviction); no error is reported.
  bool may_reclaim = true;
};

struct runtime_resources {
  device& dev;
  caching_allocator& alloc;
  pinned_host_pool& host;
  clock& clk;
  /// The stream torch computed on when these were taken: the current CUDA
  /// stream, or the simulated device's default stream behind the CPU adapter.
  stream_id compute;
  /// True when compute runs on the host (the CPU adapter): a restore must be
  /// finished before the tensor is handed back, since CPU kernels do not wait
  /// on device streams.
  bool host_synchronous;
  /// The device's index (the timeline's device of the runtime's events).
  int device_index = 0;
  /// Allocates for a restore or a move on this device and for the request's
  /// stream, with the device current, whatever device and stream are current
  /// when it runs; the memory is freed by the adapter's raw_deleter(). Throws
  /// c10::OutOfMemoryError as the adapter's allocate() does. See Note
  /// [Restores allocate for the tensor's device and stream].
  std::function<void*(const device_request&)> allocate_on{};
  /// The stream torch computes on now on this device, where a tensor is
  /// saved or used (Note [Tensors used on several streams] in
  /// runtime/transfer_engine.hpp). Empty: always `compute` (the CPU adapter).
  std::function<stream_id()> current_stream{};
};

// Note [Restores allocate for the tensor's device and stream]
// The runtime orders a restore's copy after the work of the tensor's stream
// (the one current when it was first saved), and the caching allocator reuses
// a block freed on a stream at once on that stream (Note [Stream-ordered
// reuse] in caching_allocator.hpp). So the memory a restore copies into must
// be allocated for the tensor's stream, on the tensor's device: allocated for
// whatever stream is current at unpack (a torch.cuda.stream block, backward
// on a side stream) it could be a block that queued kernels on the tensor's
// stream still read, and with another device current it would land on the
// wrong GPU.

/// Implemented by cpu_adapter and cuda_adapter. Thread-safety: any thread.
class runtime_host {
 public:
  virtual ~runtime_host() = default;
  /// The resources of the current device (opening it if needed). Throws what
  /// opening the device throws.
  virtual runtime_resources runtime_resources_now() = 0;
};

}  // namespace tp::hooks
