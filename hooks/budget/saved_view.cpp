#include "hooks/budget/saved_view.hpp"

#include <utility>

#include <ATen/ATen.h>

namespace tp::hooks {

saved_view saved_view::of(const at::Tensor& t, std::shared_ptr<saved_storage> storage) {
  saved_view v;
  v.storage = std::move(storage);
  v.sizes = t.sizes().vec();
  v.strides = t.strides().vec();
  v.storage_offset = t.storage_offset();
  v.dtype = t.scalar_type();
  return v;
}

// Built as at::from_blob builds its tensor, without the dispatcher:
// at::empty and set_ cost two dispatches per unpack, and a dispatch mode
// active in backward (a FLOP counter) saw them as the program's operators
// (bench/hook_cost_bench.py).
at::Tensor saved_view::materialize() const {
  storage->make_resident();
  c10::Storage s = storage->storage();
  const c10::DispatchKeySet keys(c10::computeDispatchKey(dtype, c10::kStrided, s.device()));
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(s), keys, c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, storage_offset);
  return t;
}

}  // namespace tp::hooks
