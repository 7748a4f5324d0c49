#pragma once
// tp::reclaim_account: one reclaim's target and the account of what it
// freed and left; tp::published_reclaim, that account for describe().
//
// Note [Reclaim rounds]
// The allocator asks for the bytes it lacks, and asks again (up to
// caching_allocator::max_reclaim_rounds) while the request still fails and
// the runtime still frees something: bytes freed inside segments that stay
// partly in use need not make a block of the size requested. Each further
// round of the same allocation (the allocator's num_alloc_retries has not
// moved) therefore frees twice what the previous one asked for, so that
// within the rounds the allocator allows, everything evictable can go and
// whole segments empty. Freeing only the shortfall again in each round can
// fail a request while most of what is evictable stays, so that a policy
// fits at a budget but not at a larger one (measured: docs/decisions.md,
// "Reclaim rounds").
//
// Note [Why a reclaim fell short]
// An out-of-memory message that says "evictable 3.5 MiB" beside "reclaim
// freed 0 B" leaves the reader guessing. So evictable counts only what
// nothing else holds, what the program still holds is reported apart, and
// the last reclaim keeps its account: what it was asked for, what it freed,
// and the bytes of the victims it had to leave (held elsewhere, or neither
// swappable, the pinned host pool being full, nor recomputable). What the
// allocator could not use of the freed bytes (fragmentation) it says itself
// (allocator/oom_report.cpp). The account is against the allocator's
// request, not the doubled target of a later round.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tp {

/// What one reclaim was asked for, freed, and had to leave (Note [Why a
/// reclaim fell short]). A value.
struct reclaim_outcome {
  std::size_t asked = 0;  ///< the allocator's request, before any doubling
  std::size_t freed = 0;
  std::size_t held = 0;   ///< victims held elsewhere: evicting them frees nothing
  std::size_t kept = 0;   ///< victims neither swappable (host pool full) nor droppable
};

/// The round and the account of the reclaim in progress (Note [Reclaim
/// rounds]). A value; memory_runtime holds one under its lock.
class reclaim_account {
 public:
  /// Starts a reclaim asked for `asked` bytes while the allocator's
  /// num_alloc_retries is `alloc_retries`, forgetting the previous one's
  /// account. Returns the bytes to free: `asked` in the first round of an
  /// allocation, doubled for each further round (saturating at SIZE_MAX).
  std::size_t begin(std::size_t asked, std::int64_t alloc_retries);
  /// 0 for an allocation's first reclaim, then 1, 2, ...
  std::uint64_t round() const { return round_; }
  /// A victim of `bytes` stayed because something else holds its storage.
  void held_elsewhere(std::size_t bytes) { held_ += bytes; }
  /// A victim of `bytes` stayed: neither swappable nor droppable.
  void kept(std::size_t bytes) { kept_ += bytes; }
  /// The account of this reclaim, which freed `freed`.
  reclaim_outcome outcome(std::size_t freed) const { return {asked_, freed, held_, kept_}; }

 private:
  std::int64_t retries_ = -1;  // num_alloc_retries at the previous reclaim
  std::uint64_t round_ = 0;
  std::size_t asked_ = 0;
  std::size_t held_ = 0;
  std::size_t kept_ = 0;
};

/// The last reclaim_outcome, readable without the runtime's lock (describe()
/// runs under the allocator's lock). Thread-safe; each field is read on its
/// own, so a reader racing a store may mix two reclaims' figures.
class published_reclaim {
 public:
  void store(const reclaim_outcome& o) noexcept;
  reclaim_outcome load() const noexcept;

 private:
  std::atomic<std::size_t> asked_{0};
  std::atomic<std::size_t> freed_{0};
  std::atomic<std::size_t> held_{0};
  std::atomic<std::size_t> kept_{0};
};

/// The clause an out-of-memory message gets for a reclaim that fell short
/// ("; its last reclaim was asked for 8.00 MiB and freed 0 B, leaving ...");
/// empty when it was asked for nothing or freed what it was asked.
std::string describe_shortfall(const reclaim_outcome& o);

}  // namespace tp
