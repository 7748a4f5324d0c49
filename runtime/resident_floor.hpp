#pragma once
// resident_floor: the bytes a step holds that no eviction can give back.
//
// Note [Resident floor]
// The most memory a step held at once that no eviction could have given
// back: memory the runtime does not manage (weights, gradients, optimizer
// state, activation gradients in flight, temporaries) plus the tensors an
// operator was using. The runtime samples it at each event (a tensor
// tracked, a tensor accessed), with the allocator's marks since the previous
// event: the high-water mark and what is allocated now.
// - The high-water moment lies between the two events. What was evictable
//   all through it is the smaller of the evictable bytes just after the
//   previous event and just before this one: a tensor tracked now is the
//   output of the operator that ran in between, in use at the high-water
//   moment; a tensor accessed at the previous event was that operator's
//   operand; a tensor accessed now was not yet in use, so it counts as
//   evictable (a backward reaches its peak in one node, while the saved
//   input of the next node waits, and that input can wait on the host).
// - Now, after the event, the accessed tensor is in use and must be
//   resident: what is allocated now less what is evictable after the event.
// The step's largest such value is the floor: the same program allocates
// the same unmanaged memory under any budget, so a budget below it cannot
// work. hooks/budget uses the figure to refuse, at once, a budget that cannot
// work (Note [Budget floor] in hooks/budget/budget_floor.cpp). One compare
// per allocation buys the high-water mark (take_allocated_high_water).
// - A budget caps mapped bytes, not allocated ones. What the step holds at
//   its start (weights, gradients, optimizer state, the input batch) sits
//   where earlier steps put it, and the free bytes beside it in shared
//   granules (runtime_allocator::stranded_bytes()) stay mapped through the
//   step: a request larger than those pieces maps more. So lowest() adds
//   the bytes stranded at the step's first event; without them the floor
//   accepted budgets that failed at the first budgeted iteration's first
//   large request. Small requests may still fill those pieces, so this errs
//   high by at most what they take.
// - With expandable segments a budget holds whole granules only (11.8 MiB
//   maps five granules of 2 MiB), so memory_runtime::lowest_floor_bytes()
//   rounds the floor up to whole ones. Measured: docs/decisions.md,
//   "Resident floor".
//
// Note [A rerun's working set]
// The steps a ratio is measured on run with no budget, so nothing is dropped
// and no segment is rerun in them; yet under the budget, a tensor the policy
// drops comes back by rerunning its segment's forward (hooks/ Note
// [Segments]), which brings the segment's inputs back and allocates what the
// forward allocates, up to the tensor, while the backward holds what it
// holds. A recompute-only policy (`dtr`) at 0.39 of a 62 MiB peak (a floor
// of 24.2 MiB, so accepted) ran out of memory in the first budgeted
// backward, three reruns deep, with 20.8 MiB allocated and nothing
// evictable; 0.44 trained (tests/python/test_budget_fuzz.py's model of seed
// 945785947). So each segment's forward is measured, in the steps with no
// budget (memory_runtime::segment_started(), segment_growth()): the most it
// held beyond what was held when it began, held as the floor counts it
// (allocated less what eviction would free, so a tensor it saved and let go
// of counts as evictable, as in a rerun, which keeps only the tensor it is
// run for), plus its inputs' bytes, which a rerun brings back; the glue hands
// the figure over with the recompute (set_recompute_cost's rerun_bytes). A
// rerun for a saved tensor stops once the forward has made it, so it holds
// only what the forward held until then (stops_at_it: the runtime keeps, per
// tensor, what its segment held when it was tracked). At an access in such a
// step, under a recompute-only policy, a droppable tensor adds a sample: what
// the step holds that no eviction gives back, t excluded, plus its rerun's
// bytes. A rerun whose input must itself be rerun runs that one first,
// holding nothing of its own yet, so a chain needs no more than its largest
// link. It is a worst case, every droppable tensor dropped at its worst
// moment, and it errs high by an input the program still holds, counted
// twice: a torchvision ResNet-18 (batch 32, 160x160) under `dtr`, which
// trained at 0.5 of its peak in 64 runs of 64, is now refused there naming
// 0.52, because rerunning its stem convolution on the CPU held 161 MiB
// (its output and the convolution's workspace) where `dtr` never dropped that
// output. Only recompute-only policies are charged: the others swap what the
// host pool takes, and charged when a full pool makes their evictions drops,
// the same ResNet-18 with forced drops (batch 16, 128x128), which trains at
// 0.85 under every policy, was refused naming 0.92, while the fuzz's 90
// cases with a 1 MiB host pool had no miss of this kind but `dtr`'s.

// Note [A saved operand is held while its operator runs]
// Autograd saves an operator's inputs as it records the node, before the
// operator allocates its output, and a tensor saved after its operator (an
// output) is the next operator's input: either way the tensor saved last is
// in use at the allocation that follows, though a policy may evict it once
// the operator is done. A rerun saves nothing and keeps every operand alive,
// so within a segment the tensor tracked at the last event counts as held
// until the next event. A segment's inputs are counted apart (rerun_bytes
// adds them), so the glue says when the tensor saved is one
// (segment_input_saved()). Only the rerun term is measured so; the floor's
// own samples still count the tensor as spare.
// Measured: docs/decisions.md, "Resident floor: resident_floor::lowest()".

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tp {

/// a less b, or 0 where b is the larger: bytes held beyond a mark or a spare.
constexpr std::size_t bytes_above(std::size_t a, std::size_t b) noexcept { return a > b ? a - b : 0; }

/// Thread-safety: none; guarded by the runtime's lock. The owner starts the
/// allocator's high-water mark afresh when it starts sampling.
class resident_floor {
 public:
  /// Whether the next sample is a step's first: its owner then passes the
  /// allocator's stranded bytes to sample() (a scan of the free blocks).
  bool at_step_start() const noexcept { return start_ == unknown; }
  /// high_water, now: the most bytes allocated since the previous sample,
  /// and now; evictable_before, evictable_after: what a policy could evict
  /// just before this event and just after it (less a tensor now in use);
  /// stranded: runtime_allocator::stranded_bytes() now, read only when
  /// at_step_start().
  void sample(std::size_t high_water, std::size_t now, std::size_t evictable_before, std::size_t evictable_after,
              std::size_t stranded) noexcept {
    const std::size_t spare = sampled_ ? std::min(evictable_before, last_evictable_) : evictable_before;
    sampled_ = true;
    if (start_ == unknown) {
      start_ = now;
      start_stranded_ = stranded;
    }
    current_ = std::max({current_, bytes_above(high_water, spare), bytes_above(now, evictable_after)});
    last_evictable_ = evictable_after;
  }
  /// Note [A rerun's working set]: at an access, what the step would hold
  /// had the accessed tensor been dropped and rerun: after sample().
  void sample_rerun(std::size_t held) noexcept { current_ = std::max(current_, held); }
  /// A step boundary: the step's peak becomes last_step().
  void end_step() noexcept {
    last_ = current_;
    if (start_ != unknown) lowest_beyond_start_ = std::min(lowest_beyond_start_, bytes_above(current_, start_));
    current_ = 0;
    start_ = unknown;
  }
  /// The peak of the last completed step and of the one in progress, the
  /// larger (at a boundary, before end_step(): the step just finished).
  std::size_t peak() const noexcept { return std::max(last_, current_); }
  /// The floor of the step in progress (at a boundary, before end_step():
  /// the step just finished), as the smallest of the steps so far: what it
  /// held at its first event plus the least any step needed beyond what it
  /// held at its own first event. The same program needs the same memory
  /// beyond what a step begins with, but a step's sample can come out above
  /// it (measured: docs/decisions.md, "Resident floor"), so the smallest refuses fewer budgets that work; and a step may begin
  /// holding more than an earlier one (the gradients and the momentum that a
  /// zero_grad() just before backward() keeps through the next forward, once
  /// they exist), so each is counted from its own start (Note [Budget floor]
  /// in hooks/budget/budget_floor.cpp), stranded bytes included.
  std::size_t lowest() const noexcept {
    if (start_ == unknown) return current_;
    return start_ + start_stranded_ + std::min(lowest_beyond_start_, bytes_above(current_, start_));
  }
  /// The stranded bytes lowest() counts: at the first event of the step in
  /// progress (0 before one).
  std::size_t stranded_at_start() const noexcept { return start_ == unknown ? 0 : start_stranded_; }

 private:
  std::size_t current_ = 0;
  std::size_t last_ = 0;
  static constexpr std::size_t unknown = SIZE_MAX;
  std::size_t start_ = unknown;                 // allocated at the step's first sample
  std::size_t start_stranded_ = 0;              // stranded bytes then
  std::size_t lowest_beyond_start_ = SIZE_MAX;  // of the completed steps
  std::size_t last_evictable_ = 0;
  bool sampled_ = false;
};

}  // namespace tp
