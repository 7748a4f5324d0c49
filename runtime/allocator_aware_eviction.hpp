#pragma once
// allocator_aware_choice: victims chosen by the bytes their eviction makes
// usable for the allocation a reclaim runs for, the policy breaking ties
// (Note [Allocator-aware eviction] in allocator/caching_allocator.hpp).
//
// Note [Allocator-aware victims]
// The policy picks first, as it would alone. When the allocator says that
// evicting the policy's pick makes less usable for the request than its
// size (its block sits among blocks in use: it frees no whole granule, no
// whole segment, no large enough range), up to k candidates are sampled (all
// of them when there are k or fewer; candidate selection stays O(k), Note
// [Cheap victim choice]) and the one whose eviction makes the most usable,
// given the victims already chosen in this reclaim call, is taken instead:
// so the victims of one call tend to be neighbours that together free whole
// granules (Coop's contiguous ranges). The policy's pick wins every tie, and
// among other candidates the least recently used; a substitute is dropped
// when the policy dropped its pick and it can be recomputed, else swapped.
// Outside a reclaim the allocator runs (proactive offload) the policy's pick
// stands.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "runtime/eviction_policy.hpp"

namespace tp {

/// Thread-safety: none; used with the runtime's lock held. Lifetime: the
/// allocator outlives it.
class allocator_aware_choice {
 public:
  allocator_aware_choice(const caching_allocator& alloc, std::size_t sample_size)
      : alloc_(alloc), sample_(sample_size) {}

  /// The victim for ctx: Note [Allocator-aware victims]. nullopt when the
  /// policy has none (no candidates).
  std::optional<eviction_choice> choose(const policy_context& ctx, eviction_policy& policy);

 private:
  const caching_allocator& alloc_;
  std::size_t sample_;
  std::uint64_t call_ = 0;           // the allocator's reclaim call chosen_ belongs to
  std::vector<const void*> chosen_;  // blocks of the victims chosen in that call
};

}  // namespace tp
