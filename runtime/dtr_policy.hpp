#pragma once
// DTR (Kirisame et al., ICLR 2021), as its authors' simulator runs it
// (DTREqClass): recompute only. The victim is the recomputable candidate
// with the lowest
//     h(t) = (cost(t) + cost of t's evicted neighbourhood) / (bytes(t) x staleness(t))
// where the neighbourhood is priced by equivalence classes (Note [Evicted
// neighbourhood] in lineage.hpp) and staleness is the time since t's last
// use. It is a drop whenever a candidate can be recomputed. When none can
// (storages lent by the program, Note [Lent storages], are never
// recomputable; nor is a tensor with no segment to rerun) the stalest
// candidate is swapped, where DTR's own simulator would run out of memory.
// Candidates are sampled (k, Note [Cheap victim choice]); when the sample
// holds no recomputable tensor the candidates are scanned for one, which
// happens only when nearly none is recomputable.

#include <cstddef>

#include "runtime/eviction_policy.hpp"

namespace tp {

/// Thread-safety: none (see eviction_policy).
class dtr_policy final : public eviction_policy {
 public:
  explicit dtr_policy(std::size_t sample_size = 32) : k_(sample_size == 0 ? 1 : sample_size) {}
  policy_kind kind() const override { return policy_kind::dtr; }
  std::optional<eviction_choice> choose(const policy_context& ctx) override;

  /// h(t) at ctx.now_ns (lower: evict first); +infinity when t cannot be
  /// recomputed. Reads ctx.graph when there is one.
  static double score(const managed_tensor& t, const policy_context& ctx);

 private:
  std::size_t k_;
};

}  // namespace tp
