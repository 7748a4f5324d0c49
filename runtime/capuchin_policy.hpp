#pragma once
// Capuchin (Peng et al., ASPLOS 2020): the victim is the sampled candidate
// whose next use is furthest away in the recorded step (its "free time");
// it is swapped when the round trip (out and back, as measured: Note [Copy
// cost model]) hides under that gap, else dropped when it is recomputable,
// else swapped anyway.
// Without a matching recorded step the gap is unknown: the candidate that has
// been idle longest is taken, and swap wins when a round trip costs less than
// recomputing.

#include <cstddef>
#include <optional>

#include "runtime/eviction_policy.hpp"

namespace tp {

/// Thread-safety: none (see eviction_policy).
class capuchin_policy final : public eviction_policy {
 public:
  explicit capuchin_policy(std::size_t sample_size = 32) : k_(sample_size == 0 ? 1 : sample_size) {}
  policy_kind kind() const override { return policy_kind::capuchin; }
  std::optional<eviction_choice> choose(const policy_context& ctx) override;

  /// The time until t's next use in the recorded step, if known.
  static std::optional<std::int64_t> gap_ns(const managed_tensor& t, const policy_context& ctx);
  /// Capuchin's action for t.
  static eviction_action action_for(const managed_tensor& t, const policy_context& ctx);
  /// Lower is a better victim: minus the gap (or minus the idle time).
  static double score(const managed_tensor& t, const policy_context& ctx);

 private:
  std::size_t k_;
};

}  // namespace tp
