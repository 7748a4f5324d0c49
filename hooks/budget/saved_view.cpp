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

at::Tensor saved_view::materialize() const {
  storage->make_resident();
  const c10::Storage& s = storage->storage();
  at::Tensor t = at::empty({0}, at::TensorOptions().dtype(dtype).device(s.device()));
  t.set_(s, storage_offset, sizes, strides);
  return t;
}

}  // namespace tp::hooks
