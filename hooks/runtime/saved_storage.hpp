#pragma once
// saved_storage: one torch storage under the budget runtime, the
// storage_binding of tensors saved for backward (and of tensors a LibTorch
// program offloads explicitly). Includes torch.
//
// Note [Saved storages]
// The runtime manages storages, not tensors: autograd may save several views
// of one storage (a ReLU's output is saved by the ReLU and by the next
// convolution), and freeing memory means freeing a storage. So the session
// keeps one saved_storage per c10::StorageImpl, shared by every saved view.
// It holds the StorageImpl itself (no TensorImpl), so "nobody else holds this
// storage" is exactly `use_count() == 1`: any tensor, view or Python storage
// object still referring to it adds a reference. That is can_release(): the
// runtime evicts only storages that nothing else holds, so an eviction always
// frees memory and nobody ever sees released storage.
// Release swaps the StorageImpl's DataPtr for an empty one (its deleter hands
// the block back to tensorpager's allocator); a restore installs a new DataPtr
// from the adapter. The StorageImpl stays the same object throughout, so
// views rebuilt from it after a restore see the restored bytes.
// Recompute runs the glue's callback (a segment replayed with its RNG state,
// python/tensorpager/_runtime.py), which returns a tensor whose storage holds
// the recomputed bytes; its DataPtr is moved in when nothing else holds that
// storage, and copied otherwise.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include "runtime/managed_tensor.hpp"

namespace tp::hooks {

class budget_session;

/// Thread-safety: the storage_binding members are called by the runtime with
/// its lock held; the others may be called from any thread. Lifetime: owned
/// by shared_ptr (the saved-tensor handles); it keeps its session alive and
/// untracks itself when destroyed.
class saved_storage final : public storage_binding {
 public:
  /// Use budget_session::adopt(). Requires: storage was allocated by allocator.
  saved_storage(std::shared_ptr<budget_session> session, c10::Storage storage, c10::Allocator& allocator);
  ~saved_storage() override;
  saved_storage(const saved_storage&) = delete;
  saved_storage& operator=(const saved_storage&) = delete;

  // --- storage_binding ----------------------------------------------------------
  void* device_ptr() const override;
  void release_device() noexcept override;
  void* allocate_device(std::size_t bytes) override;
  void recompute() override;
  bool can_release() const noexcept override;

  /// The storage; its bytes are valid only after make_resident().
  const c10::Storage& storage() const { return storage_; }
  std::size_t nbytes() const { return storage_.nbytes(); }
  /// The runtime's id while tracked.
  std::optional<tensor_id> id() const { return id_; }
  void set_id(std::optional<tensor_id> id) { id_ = id; }

  /// Makes the bytes valid on the current stream (a use: the runtime records
  /// it). Throws tp::out_of_memory (the storage stays where it was).
  void make_resident();
  /// Sets how to recompute the bytes (empty: not recomputable) and what it
  /// costs. The callback returns a tensor whose storage holds them.
  void set_recompute(std::function<at::Tensor()> fn, std::int64_t cost_ns);
  bool recomputable() const { return static_cast<bool>(recompute_); }
  /// "resident", "offloading", "on_host", "prefetching", "dropped", or
  /// "unmanaged" once its session has ended.
  const char* state() const;

 private:
  std::shared_ptr<budget_session> session_;
  c10::Storage storage_;
  c10::Allocator& allocator_;
  std::optional<tensor_id> id_;
  std::function<at::Tensor()> recompute_;
};

}  // namespace tp::hooks
