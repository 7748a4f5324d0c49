#pragma once
// DTR (Kirisame et al., ICLR 2021): evict the candidate with the lowest
// cost / (bytes x staleness), found among k sampled candidates
// (Note [Cheap victim choice]). A recomputable tensor is dropped and its cost
// is its recompute time; any other is swapped and its cost is the round trip
// of the bandwidth model, so the same score ranks both.

#include <cstddef>

#include "runtime/eviction_policy.hpp"

namespace tp {

/// Thread-safety: none (see eviction_policy).
class dtr_policy final : public eviction_policy {
 public:
  explicit dtr_policy(std::size_t sample_size = 32) : k_(sample_size == 0 ? 1 : sample_size) {}
  policy_kind kind() const override { return policy_kind::dtr; }
  std::optional<eviction_choice> choose(const policy_context& ctx) override;

  /// The score of t at ctx.now_ns (lower: evict first).
  static double score(const managed_tensor& t, const policy_context& ctx);

 private:
  std::size_t k_;
};

}  // namespace tp
