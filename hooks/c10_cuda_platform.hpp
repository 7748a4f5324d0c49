#pragma once
// The production cuda_platform: PyTorch's CUDA state through c10::cuda, and
// tp::cuda_device over a driver loaded on first use (Note [Adapter platform]
// in cuda_platform.hpp). Compiled only with TP_WITH_CUDA. Includes no torch.

#include <memory>

#include "hooks/cuda_platform.hpp"

namespace tp::hooks {

/// A new platform; it loads nothing and calls no CUDA function until the
/// first open_device(). Thread-safety: any thread.
std::unique_ptr<cuda_platform> make_c10_cuda_platform();

}  // namespace tp::hooks
