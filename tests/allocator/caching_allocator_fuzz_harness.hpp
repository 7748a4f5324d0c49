#pragma once
// fuzz_harness: the caching allocator on the simulated device, the model of
// its blocks and the checks of Note [Fuzz model] (caching_allocator_fuzz_run.hpp).
// Two drivers share it: fuzz_run draws operations at random, on one or more
// workers; run_fuzz_ops (caching_allocator_fuzz_ops.hpp) runs a literal list.
// Thread-safety: the operations may run on several threads at once (each on
// blocks of its own); check_invariants() and finish() need no operation in
// flight, which fuzz_run's model lock arranges.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator_test_support.hpp"
#include "core/errors.hpp"

namespace tp::testing {

constexpr std::size_t head_bytes = 4096;  // stamped fully; the rest sparsely
constexpr std::size_t stride = 65536;  // sparse stamps: first-touch page faults dominate otherwise
constexpr std::size_t tail_bytes = 64;

inline unsigned char stamp(std::uint64_t id, std::size_t i) {
  std::uint64_t x = id * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<unsigned char>(x);
}

template <class Fn>
void for_each_stamped(std::size_t n, Fn fn) {
  for (std::size_t i = 0; i < std::min(n, head_bytes); ++i) fn(i);
  for (std::size_t i = head_bytes + 7; i < n; i += stride) fn(i);
  for (std::size_t i = n > tail_bytes ? n - tail_bytes : 0; i < n; ++i) fn(i);
}

struct live_block {
  std::uint64_t id;
  std::size_t bytes;
  stream_id stream;
  std::vector<stream_id> used_on;
  long alloc_op = -1;  // which alloc op of a recorded worker made it (a fuzz_op block number)
};

struct guard {
  std::uintptr_t begin, end;
  event_id event;
};

struct pending_check {  // a "use" copy whose result is checked once it retires
  event_id event;
  std::vector<unsigned char> expected;
  std::unique_ptr<unsigned char[]> copy;
};

struct fuzz_counts {
  std::atomic<long> ops{0}, allocs{0}, frees{0}, uses{0}, ooms{0}, budget_refusals{0};
  long device_allocs = 0, device_frees = 0;  // segments, or maps and unmaps (expandable)
  std::atomic<long> pattern_mismatches{0}, invariant_failures{0}, early_reuses{0}, checked_copies{0};
  // What the run went through, asserted by the pinned rows (Note [Pinned
  // fuzz seeds] in caching_allocator_fuzz_test.cpp):
  /// Device memory given back inside allocate() to fit the budget: cached
  /// segments released (plain) or free granules unmapped (expandable).
  std::atomic<long> frees_to_fit{0};
  /// Allocations made while a guard of another stream's use was pending.
  std::atomic<long> allocs_beside_pending_uses{0};
  /// Invariant checks made once another worker had reached its final frees
  /// (the window of a race fixed before: docs/decisions.md, Note [Pinned
  /// fuzz seeds]).
  std::atomic<long> checks_after_a_worker_ended{0};
};

class fuzz_harness : private segment_listener {
 public:
  /// The streams operations name by index: the default stream and three others.
  static constexpr int stream_count = 4;

  explicit fuzz_harness(bool expandable)
      : rig_(std::size_t{3} << 29),
        alloc_(rig_.dev, {.budget = 768 * MiB, .max_split_size = 48 * MiB, .expandable_segments = expandable}) {
    streams_.push_back(default_stream);
    for (int i = 1; i < stream_count; ++i) streams_.push_back(rig_.dev.create_stream());
    alloc_.set_segment_listener(this);
  }
  ~fuzz_harness() override { alloc_.set_segment_listener(nullptr); }
  fuzz_harness(const fuzz_harness&) = delete;
  fuzz_harness& operator=(const fuzz_harness&) = delete;

  fuzz_counts counts;

  stream_id stream(int index) const { return streams_.at(static_cast<std::size_t>(index)); }
  simulated_device& device() { return rig_.dev; }

  /// Allocates and stamps a block on stream `stream_index`; nullptr when the
  /// allocator refused (counted in ooms).
  void* allocate(std::size_t bytes, int stream_index, live_block& out) {
    const stream_id stream = streams_[static_cast<std::size_t>(stream_index)];
    void* p = nullptr;
    allocating_ = true;
    try {
      p = alloc_.allocate(bytes, stream);
    } catch (const out_of_memory&) {
      counts.ooms++;
    }
    allocating_ = false;
    if (p == nullptr) return nullptr;
    counts.allocs++;
    check_not_guarded(reinterpret_cast<std::uintptr_t>(p), bytes);
    // The stamp stands for a kernel on `stream`: reuse on the same stream is
    // stream-ordered, so a host write must first wait for the stream's earlier
    // work (a copy still reading the block's previous contents, say).
    rig_.dev.synchronize(stream);
    const std::uint64_t id = next_id_++;
    auto* bytes_ptr = static_cast<unsigned char*>(p);
    for_each_stamped(bytes, [&](std::size_t i) { bytes_ptr[i] = stamp(id, i); });
    out = live_block{id, bytes, stream, {}};
    return p;
  }

  /// Checks the block's stamp, guards it on every stream that used it, frees it.
  void release(void* p, live_block& b) {
    const auto* bytes_ptr = static_cast<const unsigned char*>(p);
    long bad = 0;
    for_each_stamped(b.bytes, [&](std::size_t i) { bad += bytes_ptr[i] != stamp(b.id, i); });
    if (bad != 0) {
      ADD_FAILURE() << "block " << b.id << " of " << b.bytes << " B lost its pattern at " << bad << " bytes";
      counts.pattern_mismatches += bad;
    }
    {
      std::lock_guard g(guard_mutex_);
      for (const stream_id s : b.used_on) {
        const event_id e = rig_.dev.create_event();
        rig_.dev.record_event(e, s);
        const auto begin = reinterpret_cast<std::uintptr_t>(p);
        guards_.push_back({begin, begin + b.bytes, e});
      }
    }
    alloc_.deallocate(p);
    counts.frees++;
  }

  /// Copies the block's head on stream `stream_index` (after its contents
  /// were written) and record_streams it there; the copy is checked later.
  void use(void* p, live_block& b, int stream_index, std::vector<pending_check>& checks) {
    const stream_id other = streams_[static_cast<std::size_t>(stream_index)];
    const std::size_t n = std::min(b.bytes, head_bytes);
    pending_check c;
    c.copy = std::make_unique<unsigned char[]>(n);
    c.expected.resize(n);
    for (std::size_t i = 0; i < n; ++i) c.expected[i] = stamp(b.id, i);
    // The use must see the block's contents as written: order it after them.
    const event_id written = rig_.dev.create_event();
    rig_.dev.record_event(written, b.stream);
    rig_.dev.stream_wait_event(other, written);
    rig_.dev.destroy_event(written);
    rig_.dev.copy_async(c.copy.get(), p, n, other);
    c.event = rig_.dev.create_event();
    rig_.dev.record_event(c.event, other);
    alloc_.record_stream(p, other);
    if (other != b.stream) b.used_on.push_back(other);
    checks.push_back(std::move(c));
    counts.uses++;
  }

  /// Checks a use's copy once it has retired (waiting for it when `wait`).
  void finish_check(pending_check& c, bool wait) {
    if (c.copy == nullptr) return;
    if (wait) rig_.dev.synchronize_event(c.event);
    else if (!rig_.dev.query_event(c.event)) return;
    if (std::memcmp(c.copy.get(), c.expected.data(), c.expected.size()) != 0) {
      ADD_FAILURE() << "a copy on another stream read a block that had been reused";
      counts.pattern_mismatches++;
    }
    counts.checked_copies++;
    rig_.dev.destroy_event(c.event);
    c.copy.reset();
  }

  /// set_budget; a refusal (blocks in use above it) is counted, not failed.
  void set_budget(std::optional<std::size_t> budget) {
    try {
      alloc_.set_budget(budget);
    } catch (const invalid_argument&) {
      counts.budget_refusals++;  // the old budget must stay; another thread may have set one meanwhile
    }
  }

  void empty_cache() { alloc_.empty_cache(); }

  /// What follows every step: retired copies checked, reserved within budget.
  void after_step(std::vector<pending_check>& checks) {
    for (auto it = checks.begin(); it != checks.end();) {  // retire finished checks
      finish_check(*it, /*wait=*/false);
      it = it->copy == nullptr ? checks.erase(it) : std::next(it);
    }
    const auto s = alloc_.stats();
    if (s.budget >= 0 && s.reserved_bytes.all().current > s.budget) {
      ADD_FAILURE() << "reserved " << s.reserved_bytes.all().current << " > budget " << s.budget;
      counts.invariant_failures++;
    }
  }

  /// The snapshot against the statistics (caching_allocator_fuzz_harness.cpp).
  /// Requires: no operation in flight.
  void check_invariants();

  /// Requires: every block freed, every check finished, no stream held, no
  /// operation in flight. Checks the invariants and that nothing stays
  /// allocated or, after empty_cache, reserved.
  void finish();

 private:
  void check_not_guarded(std::uintptr_t begin, std::size_t bytes) {
    std::lock_guard g(guard_mutex_);
    bool pending = false;
    for (auto it = guards_.begin(); it != guards_.end();) {
      if (rig_.dev.query_event(it->event)) {
        rig_.dev.destroy_event(it->event);
        it = guards_.erase(it);
        continue;
      }
      pending = true;
      if (begin < it->end && it->begin < begin + bytes) {
        ADD_FAILURE() << "a block was handed out while work on another stream could still use it";
        counts.early_reuses++;
      }
      ++it;
    }
    if (pending) counts.allocs_beside_pending_uses++;
  }

  // segment_listener: called on the allocating thread with the allocator's
  // lock held.
  void on_segment_alloc(std::uintptr_t, std::size_t, stream_id) noexcept override {}
  void on_segment_free(std::uintptr_t, std::size_t, stream_id) noexcept override {
    if (allocating_) counts.frees_to_fit++;
  }

  static inline thread_local bool allocating_ = false;  // inside alloc_.allocate
  simulated_rig rig_;
  caching_allocator alloc_;
  std::vector<stream_id> streams_;
  std::mutex guard_mutex_;
  std::vector<guard> guards_;
  std::atomic<std::uint64_t> next_id_{1};
};

}  // namespace tp::testing
