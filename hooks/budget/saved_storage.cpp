#include "hooks/budget/saved_storage.hpp"

#include <cstring>
#include <string>
#include <utility>

#include <c10/util/Exception.h>

#include "core/errors.hpp"
#include "hooks/budget/budget_session.hpp"

namespace tp::hooks {

saved_storage::saved_storage(std::shared_ptr<budget_session> session, c10::Storage storage,
                             c10::Allocator& allocator)
    : session_(std::move(session)), storage_(std::move(storage)), allocator_(allocator) {}

saved_storage::saved_storage(std::shared_ptr<budget_session> session, const at::Tensor& program,
                             c10::Allocator& allocator, lent_tag)
    : saved_storage(std::move(session), program.storage(), allocator) {
  program_ = program.getIntrusivePtr();
  // Made now: release_device() must not allocate.
  stand_in_ = c10::Storage(c10::Storage::use_byte_size_t(), storage_.nbytes(), c10::DataPtr(nullptr, storage_.device()),
                           /*allocator=*/nullptr, /*resizable=*/false);
  stand_in_.unsafeGetStorageImpl()->release_data_and_set_meta_custom_data_ptr_error_msg_(
      "tensorpager: this tensor (a parameter or a gradient) is lent to the budget runtime while the backward no "
      "longer needs it, and its bytes are on the host; they come back when the backward ends. Code that reads it "
      "during the backward (a hook, a custom autograd Function keeping it on ctx) needs lending off: "
      "tp.budget(lend=False), or manage:activations instead of manage:all (Note [Lending parameters and "
      "gradients] in tensorpager/_lend.py)");
}

void saved_storage::redirect(const c10::Storage& from, const c10::Storage& to) noexcept {
  if (!program_->has_storage()) return;
  if (program_->storage().unsafeGetStorageImpl() != from.unsafeGetStorageImpl()) return;  // the program moved on
  const bool allowed = program_->allow_tensor_metadata_change();
  program_->set_allow_tensor_metadata_change(true);
  program_->set_storage_keep_dtype(to);
  program_->set_allow_tensor_metadata_change(allowed);
}

saved_storage::~saved_storage() { session_->forget(*this); }

void* saved_storage::device_ptr() const { return storage_.unsafeGetStorageImpl()->data_ptr().get(); }

void saved_storage::release_device() noexcept {
  if (lent()) redirect(storage_, stand_in_);  // Note [Lent storages]
  // The old DataPtr's deleter returns the block to tensorpager's allocator.
  storage_.unsafeGetStorageImpl()->set_data_ptr_noswap(c10::DataPtr(nullptr, storage_.device()));
}

void* saved_storage::allocate_device(std::size_t bytes, stream_id stream) {
  c10::DataPtr fresh;
  try {
    // Note [Restores allocate for the tensor's device and stream] in runtime_host.hpp.
    // Note [Lent storages come back packed].
    const lifetime life = lent() ? lifetime::long_lived : lifetime::transient;
    void* p = session_->resources().allocate_on({bytes, stream, life});
    fresh = c10::DataPtr(p, p, allocator_.raw_deleter(), storage_.device());
  } catch (const c10::OutOfMemoryError& e) {
    // The runtime tells an allocation that may be retried later (a prefetch
    // ahead) by tp::out_of_memory.
    throw out_of_memory(e.what_without_backtrace());
  }
  void* ptr = fresh.get();
  storage_.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  if (lent()) redirect(stand_in_, storage_);
  return ptr;
}

void saved_storage::recompute() {
  if (!recompute_) throw error("tensorpager: recompute() of a storage that has no recompute function");
  at::Tensor t = recompute_();
  if (!t.defined() || !t.has_storage()) throw error("tensorpager: a recompute returned no tensor with storage");
  c10::Storage from = t.storage();
  t = at::Tensor();
  if (from.nbytes() != storage_.nbytes() || from.device() != storage_.device()) {
    throw error("tensorpager: a recompute produced " + std::to_string(from.nbytes()) + " bytes on " +
                from.device().str() + "; the dropped storage had " + std::to_string(storage_.nbytes()) +
                " bytes on " + storage_.device().str() + " (the segment's rerun did not run the same way)");
  }
  if (from.unsafeGetStorageImpl() == storage_.unsafeGetStorageImpl()) {
    throw error("tensorpager: a recompute returned the dropped storage itself");
  }
  c10::StorageImpl* src = from.unsafeGetStorageImpl();
  if (from.use_count() == 1 && src->data_ptr().get_deleter() == allocator_.raw_deleter()) {
    storage_.unsafeGetStorageImpl()->set_data_ptr_noswap(src->set_data_ptr(c10::DataPtr(nullptr, from.device())));
    return;
  }
  // Something still holds the recomputed storage: copy its bytes, on the
  // stream the rerun ran on (current now), for which the copy is allocated.
  const stream_id stream = session_->current_stream();
  void* dst = allocate_device(storage_.nbytes(), stream);
  const runtime_resources& res = session_->resources();
  res.dev.copy_async(dst, src->data_ptr().get(), storage_.nbytes(), stream);
  if (res.host_synchronous) res.dev.synchronize(stream);
}

bool saved_storage::can_release() const noexcept { return lent() || storage_.use_count() == 1; }

bool saved_storage::can_recompute() const noexcept { return reproduces_.unchanged(); }

void saved_storage::make_resident() {
  if (!lost_.empty()) throw error(lost_);
  const auto rt = session_->runtime();
  if (!rt || !id_) return;  // unmanaged: the storage is always resident
  rt->access(*id_, session_->current_stream());  // Note [Tensors used on several streams]
  const runtime_resources& res = session_->resources();
  if (res.host_synchronous) res.dev.synchronize(res.compute);
}

void saved_storage::set_recompute(std::function<at::Tensor()> fn, std::int64_t cost_ns,
                                  saved_version reproduces, std::size_t rerun_bytes, bool stops_at_it) {
  recompute_ = std::move(fn);
  reproduces_ = std::move(reproduces);
  const auto rt = session_->runtime();
  if (rt && id_) rt->set_recompute_cost(*id_, recompute_ ? std::max<std::int64_t>(cost_ns, 1) : 0, rerun_bytes,
                                      stops_at_it);
}

void saved_storage::lose(std::string why) {
  lost_ = std::move(why);
  recompute_ = {};
}

const char* saved_storage::state() const {
  if (!lost_.empty()) return "lost";
  const auto rt = session_->runtime();
  if (!rt || !id_) return "unmanaged";
  return to_string(rt->state(*id_));
}

}  // namespace tp::hooks
