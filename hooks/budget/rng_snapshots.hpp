#pragma once
// rng_snapshots: the CPU generator's state for a segment's rerun (Note
// [Segments] in python/tensorpager/_tracker.py), taken again only when the
// generator has moved. Includes torch.
//
// Note [One RNG state while the generator stands still]
// Every recompute segment records the RNG state its forward started from, so
// that a rerun draws the same numbers. torch.get_rng_state() copies the
// generator's 5 KiB into a new tensor each time (about 3 us, a quarter of a
// segment's bookkeeping in bench/hook_cost_bench.py), though most forwards
// draw nothing: consecutive segments would record identical bytes. A
// snapshot keeps the engine's state beside the tensor it made and hands the
// same tensor back while the generator's state is still equal to it, field by
// field; a rerun only reads it (torch.set_rng_state), so sharing it is
// exact.

#include <optional>

#include <ATen/core/MT19937RNGEngine.h>
#include <ATen/core/Tensor.h>
#include <pybind11/pybind11.h>

namespace tp::hooks {

/// The default CPU generator's state as torch.get_rng_state() returns it,
/// made again only when it changed since the last call (Note [One RNG state
/// while the generator stands still]). Not thread-safe: one per tracker,
/// called with the GIL held; the generator itself is read under its mutex.
class rng_snapshots {
 public:
  /// The state now. Never modify the tensor: later calls may return it again.
  at::Tensor cpu();

 private:
  std::optional<at::mt19937_data_pod> engine_;
  std::optional<float> next_float_;
  std::optional<double> next_double_;
  at::Tensor state_;
};

/// Adds RngSnapshots (cpu() -> Tensor) to m. Call once per module, with the GIL held.
void register_rng_snapshots(pybind11::module_& m);

}  // namespace tp::hooks
