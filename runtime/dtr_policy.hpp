#pragma once
// DTR (Kirisame et al., ICLR 2021), as its authors' simulator runs it
// (simrd's DTREqClass): the victim is the droppable candidate with the
// lowest
//     h(t) = (cost(t) + cost of t's evicted neighbourhood) / (bytes(t) x staleness(t))
// where the neighbourhood is priced by equivalence classes (Note [Evicted
// neighbourhood] in lineage.hpp) and staleness is the time since t's last
// use was asked for (Note [DTR's staleness]). Every candidate is scored, as
// DTR's simulator does (its prototype samples), for policy time linear in
// the candidates: sampling 32 (Note
// [Cheap victim choice], what the other scoring policies do) ran up to 1.9%
// above DTR's figures on its logs where scoring all comes within 0.6%
// (ResNet-32) and 1.2% (Transformer) down to 0.4 (bench/results/sim_dtr.md).
//
// Note [DTR is recompute only]
// `dtr` is the recompute-only baseline the other policies are measured
// against (issue 32): every tensor it can drop, it drops. The runtime does
// not turn its drops into copies (no Note [Recompute limit]: it recomputes
// whatever DTR's heuristic would, thrash included), and while anything can
// be dropped nothing else is a victim. One deliberate difference: what
// cannot be dropped (recompute cost 0: the parameters, gradients and
// optimizer state a program lends, Note [Lent storages], or a tensor with no
// segment to rerun; or a tensor changed since its recompute was set up) is,
// to DTR, a constant that stays resident; tp's `dtr` swaps it, stalest
// first, once nothing droppable is left, so that a budget that lends
// (tp.budget's default; ResNet-18 at 0.5 in tests/python/
// test_budget_resnet18.py needs it) is not refused. So it swaps nothing on
// DTR's logs in DTR's setting, where nothing is lent, and a full host pool
// only keeps such storages resident. The other differences are the replay's,
// not the heuristic's: tensorpager evicts allocator blocks under a byte
// budget (DTR counts bytes: fragmentation costs `dtr` where plain segments
// strand blocks), and the score is read on the runtime's clock. Measured
// against DTR's figures, with the cells that differ (at 0.2 of the peak):
// bench/results/sim_dtr.md.
//
// Note [DTR's staleness]
// DTR's simulator (simrd's RuntimeV2, `last_access_int`) stamps a tensor's
// last access when an operator or a rerun asks for it, before the
// rematerialisations it then waits for; the runtime stamps last_access_ns
// once the tensor is resident. The two differ by the recompute the use
// waited for: the tensor's own, when it was dropped, and that of its
// dropped parents. So `dtr` reads last_request_ns, the stamp taken before
// ensure_resident, and the other policies keep last_access_ns. (DTR stamps
// all of an operator's inputs at once; tp stamps each as it is asked for,
// after the restores of the inputs before it: a smaller difference, left.)
// It decides DTR's ResNet-32 log at 0.2. Stamped after the restore, the
// score of a relu output recomputed at op 20 was 7% higher at op 28 than
// DTR's (staleness 8.18 ms instead of 8.79 ms: its own 0.62 ms recompute),
// so another tensor was dropped first; from there the replay drifted from
// DTR's until, at op 242, it dropped a gradient whose parents were freed
// one by one afterwards, so that its rerun at op 247 re-created every
// gradient back to the loss and the activations they read (308
// re-creations there; 2.465x against DTR's 1.332x). Stamped at the
// request, `dtr` drops what DTR's simulator drops, in the same order and
// with the same scores, for the first 122 of DTR's 198 drops and
// recomputes, into the backward, and runs 1.325x (bench/results/
// sim_dtr.md).

#include "runtime/eviction_policy.hpp"

namespace tp {

/// Thread-safety: none (see eviction_policy).
class dtr_policy final : public eviction_policy {
 public:
  dtr_policy() = default;
  policy_kind kind() const override { return policy_kind::dtr; }
  std::optional<eviction_choice> choose(const policy_context& ctx) override;
  bool recompute_only() const override { return true; }

  /// Whether t may be dropped now: recomputable, and its binding can rerun it.
  static bool droppable(const managed_tensor& t);
  /// h(t) at ctx.now_ns (lower: evict first); +infinity when t cannot be
  /// dropped. Reads ctx.graph when there is one.
  static double score(const managed_tensor& t, const policy_context& ctx);
};

}  // namespace tp
