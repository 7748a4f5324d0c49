// tensorpager_torch.hpp: explicit offload and restore for LibTorch programs.

#include <utility>

#include "core/errors.hpp"
#include "hooks/c10_errors.hpp"
#include "hooks/budget/budget_api.hpp"
#include "hooks/tensorpager_torch.hpp"

namespace tensorpager {

std::string offloaded_tensor::state() const { return view_->storage->state(); }

std::size_t offloaded_tensor::nbytes() const { return view_->storage->nbytes(); }

offloaded_tensor offload(at::Tensor&& t) {
  const auto session = tp::hooks::active_session();
  if (!session) throw tp::error("tensorpager::offload() needs an active tensorpager::budget_scope");
  auto view = tp::hooks::manage(t);
  if (!view) {
    throw tp::invalid_argument("tensorpager::offload(): this tensor's storage was not allocated by tensorpager on "
                               "the budget's device (or has no storage); nothing was done");
  }
  t = at::Tensor();  // the caller's reference goes, so the storage can leave the device
  offloaded_tensor h;
  h.view_ = std::make_shared<const tp::hooks::saved_view>(std::move(*view));
  if (auto rt = session->runtime(); rt && h.view_->storage->id()) {
    rt->offload(*h.view_->storage->id());
    rt->poll();  // a copy that has already finished gives its device block back now
  }
  return h;
}

at::Tensor restore(const offloaded_tensor& h) {
  return tp::hooks::with_c10_errors([&] { return h.view_->materialize(); });
}

}  // namespace tensorpager
