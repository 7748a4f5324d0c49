#pragma once
// resident_floor: the bytes a step holds that no eviction can give back.
//
// Note [Resident floor]
// The most memory a step held at once that no eviction could have given
// back: memory the runtime does not manage (weights, gradients, optimizer
// state, activation gradients in flight, temporaries) plus the tensors an
// operator was using. At each runtime event (a tensor tracked, a tensor
// accessed) the runtime takes the allocator's high-water mark since the
// previous event and subtracts the evictable bytes (the candidate set:
// resident, evictable, not pinned; an accessed tensor is in use, so not),
// the smaller of the figures at the two events: a tensor tracked after the
// previous event is an operator's output, and one untracked since was an
// operator's operand (autograd frees saved tensors after their node ran);
// either was needed at the high-water moment. The step's largest such value
// is the floor: the same program allocates the same unmanaged memory under
// any budget, so a budget below it cannot work. It is an estimate, close
// from below in practice (fragmentation comes on top); hooks/runtime uses the
// first step's figure to refuse, at once, a budget that cannot work (Note
// [Budget floor] in hooks/runtime/budget_floor.cpp). One compare per
// allocation buys the high-water mark (take_allocated_high_water).

#include <algorithm>
#include <cstddef>

namespace tp {

/// Thread-safety: none; guarded by the runtime's lock. The owner starts the
/// allocator's high-water mark afresh when it starts sampling.
class resident_floor {
 public:
  /// high_water: the most bytes allocated since the previous sample;
  /// evictable: what a policy could evict now.
  void sample(std::size_t high_water, std::size_t evictable) noexcept {
    const std::size_t spare = sampled_ ? std::min(evictable, last_evictable_) : evictable;
    sampled_ = true;
    current_ = std::max(current_, high_water > spare ? high_water - spare : 0);
    last_evictable_ = evictable;
  }
  /// A step boundary: the step's peak becomes last_step().
  void end_step() noexcept {
    last_ = current_;
    current_ = 0;
  }
  /// The peak of the last completed step and of the one in progress, the
  /// larger (at a boundary, before end_step(): the step just finished).
  std::size_t peak() const noexcept { return std::max(last_, current_); }

 private:
  std::size_t current_ = 0;
  std::size_t last_ = 0;
  std::size_t last_evictable_ = 0;
  bool sampled_ = false;
};

}  // namespace tp
