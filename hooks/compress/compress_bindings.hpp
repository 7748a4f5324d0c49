#pragma once
// The Python face of the activation codec (activation_codec.hpp), for
// tensorpager.compress. Registered by register_optim() (optim_bindings.hpp).

#include <pybind11/pybind11.h>

namespace tp::hooks {

/// Adds to m (tensorpager._C):
///   class PackedActivation: method (str), original_bytes, packed_bytes,
///       payload (Tensor), restore() -> Tensor
///   compress_pack(tensor, method: str) -> PackedActivation
///   compress_why_not(tensor, method: str) -> str | None
///   compress_stats() -> dict[str, int]     compress_reset_stats() -> None
/// Call once per module, with the GIL held.
void register_compress(pybind11::module_& m);

}  // namespace tp::hooks
