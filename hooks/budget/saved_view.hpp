#pragma once
// saved_view: a tensor reduced to its managed storage and the view on it
// (sizes, strides, offset, dtype), and back. What a saved-tensor handle and
// an explicitly offloaded tensor hold. Includes torch.

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "hooks/budget/saved_storage.hpp"

namespace tp::hooks {

/// A value; copies share the storage. Thread-safety: as saved_storage.
struct saved_view {
  std::shared_ptr<saved_storage> storage;
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  std::int64_t storage_offset = 0;
  c10::ScalarType dtype = c10::ScalarType::Float;

  /// Records t's view of storage. Requires: storage holds t's storage.
  static saved_view of(const at::Tensor& t, std::shared_ptr<saved_storage> storage);
  /// Makes the storage resident (a use) and returns a tensor viewing it, with
  /// the sizes, strides, offset and dtype recorded. Throws what
  /// saved_storage::make_resident() throws.
  at::Tensor materialize() const;
};

}  // namespace tp::hooks
