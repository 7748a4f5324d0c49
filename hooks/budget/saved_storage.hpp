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
// Recompute runs the glue's callback (a segment rerun with its RNG state,
// python/tensorpager/_rerun.py), which returns a tensor whose storage holds
// the recomputed bytes; its DataPtr is moved in when nothing else holds that
// storage, and copied otherwise.
//
// Note [Recompute reproduces one version]
// A rerun rebuilds the bytes as they were at one point: a segment's output
// as the segment returned it, a saved tensor as the segment left it. A later
// in-place change (a following segment that starts with ReLU(inplace=True))
// moves the storage past that point, and a rerun would then bring back the
// old values: silently wrong gradients. So the recompute carries the version
// counter of the tensor it was set up for and the version it reproduces;
// can_recompute() is false once the counter has moved on, and the runtime
// swaps the storage (or keeps it) instead of dropping it. A storage is only
// ever rebuilt by a rerun that reproduces its current version.
//
// Note [Lent storages]
// A backward's peak is often where activations cannot help: ResNet's stem
// holds its activation gradients and BatchNorm operands while every layer's
// weights and gradients sit on the device, unused until the optimizer step.
// So the program lends those storages during backward (the protocol is
// Python's: Note [Lending parameters and gradients] in
// python/tensorpager/_lend.py): a lent storage is managed like a saved one,
// but the program still holds it, so can_release() is true whatever its
// use_count. That breaks the rule above that nobody sees released storage;
// the lender keeps it instead by lending only what the backward will not
// read again and by giving everything back (restored, untracked) before any
// other code may read it. A reader the protocol missed must get an error,
// not a null pointer (a crash on the CPU, an illegal address on CUDA): so
// while the bytes are away, the program's tensor points at a stand-in
// storage of the same size whose every data access throws, saying why
// (StorageImpl's custom data-pointer error), and back at its own storage
// when the bytes return. Other tensors over the same storage are not
// redirected, so budget_session::lend() lends only a storage that no other
// tensor uses. A lent storage is never recomputed; it is swapped.
//
// Note [Lent storages come back packed]
// What is lent (parameters, gradients, optimizer state) outlives the step,
// and where it sits decides what the next step can map: Note [Long-lived
// placement] in allocator/caching_allocator.hpp. A restore of a lent storage
// therefore allocates a long-lived block, and a loan that ends with its
// bytes outside one (never evicted: a gradient where autograd allocated it,
// among the backward's activation gradients; a parameter allocated before
// the budget) moves them into one: a copy on the current stream into a
// block of the tensor's size, and the old block freed behind the copy
// (budget_session::give_back). The move is made only under a budget (the
// steps a ratio is measured on keep the natural placement, so the peak is
// the program's), and only when the allocator can serve it without evicting
// anything (caching_allocator::try_allocate): at the end of a backward the
// activations are gone and it can. A gradient that autograd allocates anew
// each step moves each step: a device-to-device copy of the model's
// gradients, under a millisecond on a GPU (HBM copies at over 1 TB/s).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include "hooks/saved_version.hpp"
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
  /// Use budget_session::lend(): Note [Lent storages].
  struct lent_tag {};
  saved_storage(std::shared_ptr<budget_session> session, const at::Tensor& program, c10::Allocator& allocator,
                lent_tag);
  ~saved_storage() override;
  saved_storage(const saved_storage&) = delete;
  saved_storage& operator=(const saved_storage&) = delete;

  // --- storage_binding ----------------------------------------------------------
  void* device_ptr() const override;
  void release_device() noexcept override;
  void* allocate_device(std::size_t bytes, stream_id stream) override;
  void recompute() override;
  bool can_release() const noexcept override;
  /// Note [Recompute reproduces one version].
  bool can_recompute() const noexcept override;

  /// The storage; its bytes are valid only after make_resident().
  const c10::Storage& storage() const { return storage_; }
  std::size_t nbytes() const { return storage_.nbytes(); }
  /// The runtime's id while tracked.
  std::optional<tensor_id> id() const { return id_; }
  void set_id(std::optional<tensor_id> id) { id_ = id; }

  /// Makes the bytes valid on the current stream (a use: the runtime records
  /// it). Throws tp::out_of_memory (the storage stays where it was), and
  /// tp::error once the storage is lost().
  void make_resident();
  /// Note [Session lifetime]: the session ended while the bytes could not be
  /// brought back (a recompute that failed); every later make_resident()
  /// throws tp::error with `why`. Requires: untracked.
  void lose(std::string why);
  /// Sets how to recompute the bytes (empty: not recomputable) and what it
  /// costs. The callback returns a tensor whose storage holds them as they
  /// were at `reproduces` (Note [Recompute reproduces one version]; a
  /// default saved_version, of a tensor with no counter, is never stale).
  /// rerun_bytes, stops_at_it: what the callback holds at its peak, and
  /// whether it stops once its segment's forward has made the tensor
  /// (memory_runtime::set_recompute_cost; 0: unknown).
  void set_recompute(std::function<at::Tensor()> fn, std::int64_t cost_ns, saved_version reproduces = {},
                     std::size_t rerun_bytes = 0, bool stops_at_it = false);
  bool recomputable() const { return static_cast<bool>(recompute_); }
  /// Held by the program as well (Note [Lent storages]).
  bool lent() const { return static_cast<bool>(program_); }
  budget_session& session() const { return *session_; }
  /// "resident", "offloading", "on_host", "prefetching", "dropped", or
  /// "unmanaged" once its session has ended ("lost" when it ended without
  /// the bytes).
  const char* state() const;

 private:
  std::shared_ptr<budget_session> session_;
  c10::Storage storage_;
  c10::Allocator& allocator_;
  std::optional<tensor_id> id_;
  std::function<at::Tensor()> recompute_;
  std::string lost_;  // why the bytes are gone, once lose() was called
  saved_version reproduces_;  // Note [Recompute reproduces one version]
  // Note [Lent storages]: the program's tensor (set only when lent) and the
  // storage that stands in for its own while the bytes are away.
  c10::intrusive_ptr<c10::TensorImpl> program_;
  c10::Storage stand_in_;
  /// Points the program's tensor at `to` when it refers to `from`.
  void redirect(const c10::Storage& from, const c10::Storage& to) noexcept;
};

}  // namespace tp::hooks
