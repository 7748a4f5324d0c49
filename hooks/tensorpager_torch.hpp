#pragma once
// tensorpager for LibTorch programs, the part that names torch types:
// explicit offload and restore of a tensor under an active budget_scope.
//
//   tensorpager::budget_scope scope({.bytes = 8ull << 30});
//   at::Tensor big = ...;
//   auto handle = tensorpager::offload(std::move(big));  // copied to pinned host memory
//   ...                                                   // the device block is free
//   at::Tensor back = tensorpager::restore(handle);       // bit-identical
//
// Python programs get this automatically for saved activations (tp.budget()).

#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

#include "hooks/tensorpager.hpp"

namespace tp::hooks {
struct saved_view;
}

namespace tensorpager {

/// A tensor handed to the runtime. Copies share it. While it lives the
/// runtime may keep its storage on the device, on the host, or (never, for
/// an offloaded tensor: it is not recomputable) dropped.
class offloaded_tensor {
 public:
  /// "resident", "offloading", "on_host", "prefetching", or "unmanaged" once
  /// the budget_scope has ended (the bytes are then on the device).
  std::string state() const;
  std::size_t nbytes() const;

 private:
  friend offloaded_tensor offload(at::Tensor&& t);
  friend at::Tensor restore(const offloaded_tensor& h);
  std::shared_ptr<const tp::hooks::saved_view> view_;
};

/// Takes t (the caller's reference is released) and starts copying its
/// storage to pinned host memory; the device block is freed when the copy has
/// completed. If other tensors (views) still share the storage, nothing is
/// copied yet: the storage stays managed and is evicted when the budget needs
/// it after they are gone. Throws tp::error without an active budget_scope,
/// tp::invalid_argument for a tensor tensorpager did not allocate (t is then
/// left as it was).
offloaded_tensor offload(at::Tensor&& t);

/// The tensor again, with its bytes on the device (copied back and waited
/// for on the current stream if needed). Bit-identical to what was offloaded.
/// Throws c10::OutOfMemoryError when the budget leaves no room even after
/// evicting (the handle stays valid).
at::Tensor restore(const offloaded_tensor& h);

}  // namespace tensorpager
