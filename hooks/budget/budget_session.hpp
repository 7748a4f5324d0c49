#pragma once
// budget_session: one memory_runtime over the installed adapter's current
// device, and the saved storages it manages (Note [Saved storages] in
// saved_storage.hpp). Built by tensorpager::budget_scope (C++) and
// tp.budget() (Python); at most one is active per process. Includes torch.
//
// Note [Session lifetime]
// Saved tensors can outlive the scope that saved them (a graph kept after the
// `with` block). So every saved_storage holds the session by shared_ptr, and
// close() ends management without destroying anything: it makes every
// tracked storage resident again, untracks it, and destroys the runtime (which
// stops being the allocator's reclaimer). Storages then behave as plain
// torch storages until their handles die. close() always ends the session,
// so that the process stays usable whatever happened inside it: a storage
// that cannot be brought back (its recompute fails, as it does when the
// block itself failed halfway through a forward) is lost, and its unpack
// raises an error saying why; it never yields stale bytes. Calls into the runtime are made
// without the session's mutex held: a restore may recompute, the recompute
// runs Python, and Python may adopt or restore other storages.
//
// Note [A session opens its device at the first tensor]
// A session takes its device, streams and pinned pool (runtime_resources)
// and builds its runtime when it adopts or lends its first storage, not when
// it begins: manage:activations begins a session at `import torch`, and
// opening CUDA there would initialise the driver during the import (a
// CUDA_VISIBLE_DEVICES set afterwards ignored, forks and every subprocess
// that imports torch, DataLoader and compile workers included, holding a
// context on GPU 0; history: docs/decisions.md). A storage tensorpager allocated exists only
// once its device is in use, so the first one opens nothing new. Until then
// the session's statistics are zeros and a step does nothing. Beginning a
// session asks for the budget in force only where it can be told without a
// device (allocator_control::budget_if_known): a share of a device
// (budget:0.9device) has no size before the device opens, so a session that
// changes no budget leaves that share to each device as it opens, and its
// end restores the configured budget (restore_configured_budget).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>

#include "hooks/runtime_host.hpp"
#include "runtime/runtime.hpp"

namespace tp::hooks {

class saved_storage;

/// Thread-safety: every member may be called from any thread.
class budget_session : public std::enable_shared_from_this<budget_session> {
 public:
  struct options {
    policy_kind policy = default_policy;
    bool prefetch_ahead = true;
  };

  /// A session whose runtime is built over open() at its first storage
  /// (Note [A session opens its device at the first tensor]), registering
  /// it as the resources' allocator's reclaimer. allocator is the adapter as
  /// torch sees it: storages whose DataPtr has another deleter than
  /// allocator.raw_deleter() are not managed.
  static std::shared_ptr<budget_session> create(std::function<runtime_resources()> open, c10::Allocator& allocator,
                                                options opts);
  /// The same over resources taken already.
  static std::shared_ptr<budget_session> create(runtime_resources res, c10::Allocator& allocator, options opts);
  ~budget_session();
  budget_session(const budget_session&) = delete;
  budget_session& operator=(const budget_session&) = delete;

  /// The storage of t under management, shared with earlier adoptions of
  /// the same storage; nullptr when t is not manageable (no storage, not
  /// allocated by tensorpager on this device, empty) or the session is
  /// closed. `fresh` says whether this call started managing it.
  std::shared_ptr<saved_storage> adopt(const at::Tensor& t, bool* fresh = nullptr);
  /// t's storage, which the program holds (a parameter, a gradient), under
  /// management and evictable until the returned handle dies (Note [Lent
  /// storages] in saved_storage.hpp); nullptr when t is not manageable, its
  /// storage is managed already, or another tensor uses any of it.
  std::shared_ptr<saved_storage> lend(const at::Tensor& t);
  /// Ends a loan: its bytes resident again, untracked, and in a long-lived
  /// block where the allocator can place them without evicting (Note [Lent
  /// storages come back packed] in saved_storage.hpp); resets `loan`. Throws
  /// what make_resident() throws, and the loan then stands.
  void give_back(std::shared_ptr<saved_storage>& loan);

  /// Step boundary (memory_runtime::step).
  void step();
  runtime_stats stats() const;
  policy_kind policy() const { return opts_.policy; }
  bool closed() const;
  /// Note [Session lifetime]. Idempotent; never leaves the session open.
  /// Returns how many storages were lost, and the first one's reason.
  std::pair<std::size_t, std::string> close();

  // --- for saved_storage ----------------------------------------------------------
  /// The runtime, or nullptr before the first storage and once closed. The
  /// shared_ptr keeps it alive for the caller's call.
  std::shared_ptr<memory_runtime> runtime() const;
  /// Requires: a storage was adopted or lent (the resources are taken then).
  const runtime_resources& resources() const { return *res_; }
  /// The stream torch computes on now on the session's device (Note
  /// [Tensors used on several streams] in runtime/transfer_engine.hpp).
  stream_id current_stream() const;
  /// Called by ~saved_storage.
  void forget(saved_storage& s) noexcept;

 private:
  budget_session(std::function<runtime_resources()> open, c10::Allocator& allocator, options opts);
  /// Whether t's storage is one this session can manage (adopt's checks);
  /// opens the session's resources for a storage tensorpager allocated.
  bool manageable(const at::Tensor& t);
  /// Moves storage's bytes into a long-lived block, under a budget; whether
  /// it did.
  bool move_to_long_lived(const c10::Storage& storage);
  /// The runtime, built over open_() the first time (Note [A session opens
  /// its device at the first tensor]); nullptr once closed. Requires mu_ held.
  std::shared_ptr<memory_runtime> open_locked();

  std::function<runtime_resources()> open_;
  std::optional<runtime_resources> res_;  // set once, by open_locked
  c10::Allocator& allocator_;
  options opts_;
  mutable std::mutex mu_;  // guards res_, runtime_, closed_, by_storage_, last_stats_
  std::shared_ptr<memory_runtime> runtime_;
  bool closed_ = false;
  std::unordered_map<const void*, std::weak_ptr<saved_storage>> by_storage_;  // by StorageImpl
  runtime_stats last_stats_;  // the runtime's figures when it closed
};

}  // namespace tp::hooks
