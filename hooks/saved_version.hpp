#pragma once
// saved_version: autograd's in-place check, for saved tensors that went
// through a pack hook. Includes torch.
//
// Note [In-place changes to saved tensors]
// Autograd checks at unpack that a saved tensor was not changed in place
// since it was saved, and raises otherwise; but with saved-tensor hooks it
// checks nothing (it holds only what the pack hook returned). Every pack hook
// of tensorpager therefore keeps the tensor's version counter (shared by
// every view of it; keeping it holds no memory) and the version at pack, and
// its unpack raises autograd's error when they differ, whatever path the
// tensor took: managed by the budget runtime or not (a parameter, a view of
// one, a leaf input, a tensor of another allocator), compressed or exact.
// Tensors without a counter (inference tensors, which autograd never saves)
// are not checked. The same check guards a segment's inputs, held for its
// rerun (python/tensorpager/_rerun.py): a rerun from changed inputs
// would recompute wrong activations, so it raises instead.

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

namespace tp::hooks {

/// A value. Thread-safety: check() may be called from any thread (the
/// counter is atomic).
class saved_version {
 public:
  saved_version() = default;
  /// Records t's version counter and its version now (nothing when t has no
  /// counter). Requires: t defined.
  explicit saved_version(const at::Tensor& t) {
    if (const c10::VariableVersion& v = t.unsafeGetTensorImpl()->version_counter(); v.enabled()) {
      counter_ = v;
      at_ = v.current_version();
    }
  }

  /// The same counter, at another version (what a rerun reproduces).
  saved_version at_version(std::uint32_t version) const {
    saved_version v = *this;
    v.at_ = version;
    return v;
  }

  /// Whether the tensor is still at the recorded version (true without a counter).
  bool unchanged() const noexcept { return !counter_ || counter_->current_version() == at_; }
  /// Throws autograd's error, naming the tensor (dtype and sizes), when it
  /// was changed in place since it was recorded.
  void check(c10::ScalarType dtype, c10::IntArrayRef sizes) const {
    if (unchanged()) return;
    TORCH_CHECK(false,
                "one of the variables needed for gradient computation has been modified by an inplace "
                "operation: [",
                c10::toString(dtype), " ", sizes, "] is at version ", counter_->current_version(),
                "; expected version ", at_,
                " instead. tensorpager saved it for backward and, like autograd without hooks, refuses to "
                "compute gradients from changed data (clone it before changing it in place)");
  }

  /// The counter, where the tensor has one (for Note [Recompute reproduces one version]).
  const std::optional<c10::VariableVersion>& counter() const { return counter_; }
  /// The version recorded.
  std::uint32_t at() const { return at_; }

 private:
  std::optional<c10::VariableVersion> counter_;
  std::uint32_t at_ = 0;
};

}  // namespace tp::hooks
