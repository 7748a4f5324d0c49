#pragma once
// Registers the budget runtime's Python face on tensorpager._C (used by
// python/tensorpager/_runtime.py). python_module.cpp calls register_runtime()
// once, inside PYBIND11_MODULE.

#include <pybind11/pybind11.h>

namespace tp::hooks {

/// Adds to m:
///   budget_begin(bytes: int | None, ratio: float | None, policy: str | None,
///                prefetch: bool) -> int | None   (the previous budget)
///   budget_end(previous: int | None) -> None
///   budget_active() -> bool          budget_step(resolve_ratio=True, peak=None) -> None
///   budget_remeasure() -> bool
///   runtime_stats() -> dict[str, int]
///   segment_started() -> None        segment_growth() -> int
///   segment_input_saved() -> None
///   pack(tensor, manage=True) -> SavedTensor
///   SavedTensor: unpack() -> Tensor, set_recompute(fn | None, cost_ns, version=None,
///                index=None, whole=False, rerun_bytes=0),
///                managed, key, fresh, nbytes, state, recomputable, can_recompute
/// Call once per module, with the GIL held.
void register_runtime(pybind11::module_& m);

}  // namespace tp::hooks
