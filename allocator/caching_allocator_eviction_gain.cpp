// caching_allocator: what freeing a block would give the request a reclaim
// runs for (Note [Allocator-aware eviction] in caching_allocator.hpp), for
// the runtime's allocator-aware victim choice.

#include <algorithm>

#include "allocator/caching_allocator.hpp"

namespace tp {

using detail::block;

using size_policy::whole_granules;

std::size_t caching_allocator::usable_if_freed(const void* ptr, const std::vector<const void*>& also,
                                               const reclaim_request& r) const {
  std::lock_guard lock(mutex_);
  const auto it = allocated_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == allocated_.end()) return 0;
  const block* b = it->second;
  // Free once b and the victims chosen before it are: cached, or one of them.
  const auto free_after = [&](const block* x) {
    if (x == nullptr || !x->mapped) return false;
    if (x->is_cached()) return true;
    return x->allocated && std::find(also.begin(), also.end(), x->ptr()) != also.end();
  };
  const block* first = b;
  while (free_after(first->prev)) first = first->prev;
  const block* last = b;
  while (free_after(last->next)) last = last->next;
  const std::uintptr_t lo = first->address;
  const std::uintptr_t hi = last->end();
  const detail::segment& seg = *b->seg;
  const bool same_pool = seg.stream == r.stream && seg.pool == size_policy::pool_for(r.size) && seg.life == r.life;
  if (same_pool && hi - lo >= r.size) return r.size;  // the free range serves the request as it is
  if (!seg.expandable) {
    // A plain segment helps only when it empties: it can then be released.
    return first->prev == nullptr && last->next == nullptr ? seg.size : 0;
  }
  // Granules that b completes: those of the whole free range minus those of
  // the parts left and right of b, which are unmappable already.
  const std::size_t g = granularity_;
  std::size_t gain = whole_granules(lo, hi, g) - whole_granules(lo, b->address, g) - whole_granules(b->end(), hi, g);
  // Next to unmapped space of the request's own segment, b's bytes need not
  // be mapped for it.
  const bool grows = (first->prev != nullptr && !first->prev->mapped) || (last->next != nullptr && !last->next->mapped);
  if (same_pool && grows) gain = std::max(gain, b->size);
  return gain;
}

}  // namespace tp
