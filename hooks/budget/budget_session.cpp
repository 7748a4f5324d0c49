#include "hooks/budget/budget_session.hpp"

#include <cstdint>
#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

#include "allocator/size_policy.hpp"
#include "core/errors.hpp"
#include "hooks/profiler_glue.hpp"
#include "hooks/budget/saved_storage.hpp"

namespace tp::hooks {

std::shared_ptr<budget_session> budget_session::create(std::function<runtime_resources()> open,
                                                       c10::Allocator& allocator, options opts) {
  return std::shared_ptr<budget_session>(new budget_session(std::move(open), allocator, opts));
}

std::shared_ptr<budget_session> budget_session::create(runtime_resources res, c10::Allocator& allocator,
                                                       options opts) {
  return create([res] { return res; }, allocator, opts);
}

budget_session::budget_session(std::function<runtime_resources()> open, c10::Allocator& allocator, options opts)
    : open_(std::move(open)), allocator_(allocator), opts_(opts) {}

budget_session::~budget_session() {
  // Every saved_storage holds the session, so none is left: the runtime
  // tracks nothing and can go.
  if (runtime_) detach_runtime(runtime_.get());
}

std::shared_ptr<memory_runtime> budget_session::open_locked() {
  if (closed_) return nullptr;
  if (runtime_) return runtime_;
  res_.emplace(open_());  // Note [A session opens its device at the first tensor]
  memory_runtime::options ro;
  ro.policy = opts_.policy;
  ro.prefetch_ahead = opts_.prefetch_ahead;
  // The runtime's one-time notices (a full host pool: recompute instead of
  // swap, or keep the tensor) go to stderr, as PyTorch's warnings do.
  ro.log = [](std::string_view what) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(what.size()), what.data());
  };
  runtime_ = std::make_shared<memory_runtime>(res_->dev, res_->alloc, res_->host, res_->clk, ro);
  // Offloads, prefetches, recomputes, stalls and steps reach the timeline.
  attach_runtime(runtime_.get(), static_cast<std::int16_t>(res_->device_index));
  return runtime_;
}

std::shared_ptr<memory_runtime> budget_session::runtime() const {
  std::lock_guard lock(mu_);
  return runtime_;
}

bool budget_session::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

stream_id budget_session::current_stream() const {
  return res_->current_stream ? res_->current_stream() : res_->compute;
}

bool budget_session::manageable(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || t.is_sparse() || t.is_nested()) return false;
  const c10::Storage& storage = t.storage();
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  if (impl == nullptr || storage.nbytes() == 0 || impl->data_ptr().get() == nullptr) return false;
  if (impl->data_ptr().get_deleter() != allocator_.raw_deleter()) return false;  // not ours
  // Ours, so its device is in use already: opening the session's costs nothing new.
  std::lock_guard lock(mu_);
  if (!open_locked()) return false;
  // One runtime per device: a tensor on another device is not this session's.
  const c10::Device device = res_->host_synchronous
                                 ? c10::Device(c10::DeviceType::CPU)
                                 : c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(res_->device_index));
  return storage.device() == device;
}

std::shared_ptr<saved_storage> budget_session::adopt(const at::Tensor& t, bool* fresh) {
  if (fresh != nullptr) *fresh = false;
  if (!manageable(t)) return nullptr;
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  std::unique_lock lock(mu_);
  if (!runtime_) return nullptr;
  const stream_id stream = current_stream();
  if (auto it = by_storage_.find(impl); it != by_storage_.end()) {
    if (auto existing = it->second.lock()) {
      // A lent storage stays the program's: saving it keeps it as it is.
      if (existing->lent()) return nullptr;
      const auto rt = runtime_;
      lock.unlock();
      // Saved again, maybe by an op on another stream: Note [Tensors used on
      // several streams] in runtime/transfer_engine.hpp.
      if (existing->id()) rt->use_on(*existing->id(), stream);
      return existing;
    }
  }
  auto s = std::make_shared<saved_storage>(shared_from_this(), t.storage(), allocator_);
  by_storage_[impl] = s;
  const auto rt = runtime_;
  lock.unlock();
  // Tracking may evict (proactive offload) and so call other bindings: no lock.
  s->set_id(rt->track(*s, s->nbytes(), stream, /*recompute_cost_ns=*/0));
  if (fresh != nullptr) *fresh = true;
  return s;
}

std::shared_ptr<saved_storage> budget_session::lend(const at::Tensor& t) {
  // Only the program's tensor may use the storage, all of it: another tensor
  // over it (a gradient autograd stole while it flows on, a view, a
  // flattened parameter's siblings) would read released bytes. A Python
  // storage object (t.untyped_storage(), which torch keeps alive with the
  // storage once made; the timeline tags parameters so) holds one reference
  // too, and reads no tensor's bytes by itself.
  if (!manageable(t) || t.is_view() || t.storage_offset() != 0) return nullptr;
  c10::StorageImpl* impl = t.storage().unsafeGetStorageImpl();
  const std::size_t python_object = impl->pyobj_slot()->load_pyobj() != nullptr ? 1 : 0;
  if (t.storage().use_count() != 1 + python_object) return nullptr;
  if (t.storage().nbytes() != static_cast<std::size_t>(t.numel()) * t.itemsize()) return nullptr;
  std::unique_lock lock(mu_);
  if (!runtime_) return nullptr;
  if (auto it = by_storage_.find(impl); it != by_storage_.end() && !it->second.expired()) return nullptr;
  auto s = std::make_shared<saved_storage>(shared_from_this(), t, allocator_, saved_storage::lent_tag{});
  by_storage_[impl] = s;
  const auto rt = runtime_;
  lock.unlock();
  s->set_id(rt->track(*s, s->nbytes(), current_stream(), /*recompute_cost_ns=*/0));
  return s;
}

void budget_session::give_back(std::shared_ptr<saved_storage>& loan) {
  loan->make_resident();
  const c10::Storage storage = loan->storage();
  const std::weak_ptr<saved_storage> untracked = loan;
  loan.reset();  // untracked: the program's alone again, unless another handle holds it
  if (untracked.expired()) move_to_long_lived(storage);
}

// Note [Lent storages come back packed] in saved_storage.hpp.
bool budget_session::move_to_long_lived(const c10::Storage& storage) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  void* src = impl->data_ptr().get();
  const runtime_resources& res = resources();
  if (src == nullptr || impl->data_ptr().get_deleter() != allocator_.raw_deleter()) return false;
  const std::size_t n = storage.nbytes();
  if (size_policy::placed_as(size_policy::block_size(n), lifetime::long_lived) != lifetime::long_lived) return false;  // small: stays
  if (!res.alloc.budget() || res.alloc.lifetime_of(src) != lifetime::transient) return false;
  const stream_id stream = current_stream();
  void* dst = res.allocate_on({n, stream, lifetime::long_lived, /*may_reclaim=*/false});
  if (dst == nullptr) return false;
  res.dev.copy_async(dst, src, n, stream);
  if (res.host_synchronous) res.dev.synchronize(stream);
  res.alloc.record_stream(src, stream);  // freed behind the copy, whatever stream it was allocated for
  impl->set_data_ptr_noswap(c10::DataPtr(dst, dst, allocator_.raw_deleter(), storage.device()));
  return true;
}

void budget_session::forget(saved_storage& s) noexcept {
  std::shared_ptr<memory_runtime> rt;
  {
    std::lock_guard lock(mu_);
    const void* impl = s.storage().unsafeGetStorageImpl();
    if (auto it = by_storage_.find(impl); it != by_storage_.end() && it->second.expired()) by_storage_.erase(it);
    rt = runtime_;
  }
  if (rt && s.id()) {
    try {
      rt->untrack(*s.id());
    } catch (...) {
      // untrack throws only for an unknown id, which would be a bug here;
      // a destructor must not throw.
    }
  }
}

void budget_session::step() {
  if (const auto rt = runtime()) rt->step();
}

runtime_stats budget_session::stats() const {
  std::shared_ptr<memory_runtime> rt;
  {
    std::lock_guard lock(mu_);
    if (!runtime_) return last_stats_;
    rt = runtime_;
  }
  return rt->stats();
}

std::pair<std::size_t, std::string> budget_session::close() {
  std::vector<std::shared_ptr<saved_storage>> live;
  std::shared_ptr<memory_runtime> rt;
  {
    std::lock_guard lock(mu_);
    if (!runtime_) {
      closed_ = true;  // never opened, or closed already
      return {};
    }
    rt = runtime_;
    for (auto& [impl, weak] : by_storage_) {
      if (auto s = weak.lock()) live.push_back(std::move(s));
    }
  }
  std::vector<std::pair<saved_storage*, std::string>> lost;
  for (auto& s : live) {
    try {
      s->make_resident();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      lost.emplace_back(s.get(), what.substr(0, what.find('\n')));  // a Python error's first line
    }
  }
  detach_runtime(rt.get());
  {
    std::lock_guard lock(mu_);
    last_stats_ = rt->stats();
    runtime_.reset();
    closed_ = true;
    by_storage_.clear();
  }
  for (auto& s : live) {
    if (s->id()) rt->untrack(*s->id());
    s->set_id(std::nullopt);
  }
  for (auto& [s, why] : lost) {
    s->lose("tensorpager: this saved tensor was lost when its budget ended: it could not be brought back (" + why +
            ")");
  }
  if (res_->host_synchronous) res_->dev.synchronize(res_->compute);
  // rt (and with it the reclaimer registration) goes when the last caller
  // holding it returns.
  if (lost.empty()) return {};
  return {lost.size(), lost.front().second};
}

}  // namespace tp::hooks
