#pragma once
// LRU, the baseline: evict the least recently used candidate, by swapping.
// O(1): the front of candidate_set's access-ordered list.

#include "runtime/eviction_policy.hpp"

namespace tp {

/// Thread-safety: none (see eviction_policy).
class lru_policy final : public eviction_policy {
 public:
  policy_kind kind() const override { return policy_kind::lru; }
  std::optional<eviction_choice> choose(const policy_context& ctx) override {
    if (ctx.candidates.empty()) return std::nullopt;
    return eviction_choice{*ctx.candidates.lru_begin(), eviction_action::swap};
  }
};

}  // namespace tp
