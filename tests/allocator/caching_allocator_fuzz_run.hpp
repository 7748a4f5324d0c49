#pragma once
// Over 400 lines because fuzz_run is one class whose workers, driver thread and invariant checks share one model.
// fuzz_run: randomised operation sequences against the caching allocator on
// the simulated device, with a model of the live blocks and invariant checks.
//
// Note [Fuzz model]
// Workers allocate (1 B to 64 MiB, log-uniform), free, "use" a block on
// another stream (a copy of its head into a host buffer + record_stream),
// empty the cache, change the budget and wait on events, over 4 streams.
// A driver thread holds and releases streams at random, the way GPU work
// finishes on its own schedule, so frees really wait on pending events.
// Every block is stamped with bytes derived from its id when allocated (after
// synchronizing its stream, as a kernel on that stream would be ordered) and
// checked when freed; the copies made by "uses" are checked against the same
// stamp once they retire, so a block reused too early shows up as a mismatch.
// Before a free, the test records its own guard event on every stream that
// used the block; a later allocation that overlaps a guarded range while its
// guard is pending is a violation (the allocator's event comes after the
// guard on the same stream, so it cannot have completed either).
// Every case runs with plain and with expandable segments (Note [Expandable
// segments]); with expandable segments the invariants also check that each
// snapshot segment is a whole number of granules and that reserved bytes are
// the device's mapped bytes.
//
// The harness only: the cases, and the seeds they run, are in
// caching_allocator_fuzz_test.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <thread>
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
  // What the run went through, asserted by the pinned seeds (Note [Pinned
  // fuzz seeds] in caching_allocator_fuzz_test.cpp):
  /// Device memory given back inside allocate() to fit the budget: cached
  /// segments released (plain) or free granules unmapped (expandable).
  std::atomic<long> frees_to_fit{0};
  /// Allocations made while a guard of another stream's use was pending.
  std::atomic<long> allocs_beside_pending_uses{0};
  /// Invariant checks made once another worker had reached its final frees
  /// (the window of the race fixed in 24c06cc).
  std::atomic<long> checks_after_a_worker_ended{0};
};

class fuzz_run : private segment_listener {
 public:
  fuzz_run(std::uint64_t seed, int workers, long ops, int global_check_every, bool expandable)
      : seed_(seed), workers_(workers), ops_per_worker_(ops / workers), check_every_(global_check_every),
        rig_(std::size_t{3} << 29),
        alloc_(rig_.dev, {.budget = 768 * MiB, .max_split_size = 48 * MiB, .expandable_segments = expandable}) {
    streams_.push_back(default_stream);
    for (int i = 0; i < 3; ++i) streams_.push_back(rig_.dev.create_stream());
    alloc_.set_segment_listener(this);
  }
  ~fuzz_run() override { alloc_.set_segment_listener(nullptr); }
  fuzz_run(const fuzz_run&) = delete;
  fuzz_run& operator=(const fuzz_run&) = delete;

  void run() {
    std::atomic<bool> done{false};
    std::thread driver([&] { drive_streams(done); });
    std::vector<std::thread> threads;
    for (int w = 0; w < workers_; ++w) threads.emplace_back([this, w] { work(w); });
    for (auto& t : threads) t.join();
    done = true;
    driver.join();
    for (const stream_id s : streams_) rig_.dev.release_stream(s);
    finish();
  }

  fuzz_counts counts;

 private:
  // Holds and releases streams at random, like GPU work finishing late.
  void drive_streams(std::atomic<bool>& done) {
    std::mt19937_64 rng(seed_ ^ 0xD1B54A32D192ED03ull);
    while (!done) {
      const stream_id s = streams_[1 + rng() % 3];
      rig_.dev.hold_stream(s);
      std::this_thread::sleep_for(std::chrono::microseconds(5 + rng() % 60));
      rig_.dev.release_stream(s);
      rig_.dev.poll();
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30));
    }
  }

  std::size_t random_size(std::mt19937_64& rng) {
    const double e = std::uniform_real_distribution<double>(0.0, 26.0)(rng);  // 1 B .. 64 MiB
    return std::max<std::size_t>(1, static_cast<std::size_t>(std::exp2(e)));
  }

  void work(int w) {
    std::mt19937_64 rng(seed_ + 7919u * static_cast<unsigned>(w));
    std::map<void*, live_block> mine;
    std::vector<pending_check> checks;
    for (long i = 0; i < ops_per_worker_; ++i) {
      {
        std::shared_lock step(model_mutex_);
        step_once(rng, mine, checks);
      }
      counts.ops++;
      if (check_every_ > 0 && (i + 1) % check_every_ == 0) {
        std::unique_lock all(model_mutex_);
        if (workers_ended_ > 0) counts.checks_after_a_worker_ended++;
        check_invariants();
      }
    }
    workers_ended_++;
    // Under the model lock like every other step: another worker may be
    // checking the invariants (a snapshot and the statistics, read apart).
    std::shared_lock step(model_mutex_);
    for (auto& [ptr, b] : mine) release(ptr, b);
    for (auto& c : checks) finish_check(c, /*wait=*/true);
  }

  void step_once(std::mt19937_64& rng, std::map<void*, live_block>& mine, std::vector<pending_check>& checks) {
    const unsigned dice = static_cast<unsigned>(rng() % 100);
    if (dice < 42 || mine.empty()) {
      allocate_one(rng, mine);
    } else if (dice < 75) {
      auto it = std::next(mine.begin(), static_cast<long>(rng() % mine.size()));
      release(it->first, it->second);
      mine.erase(it);
    } else if (dice < 87) {
      auto it = std::next(mine.begin(), static_cast<long>(rng() % mine.size()));
      use_on_other_stream(rng, it->first, it->second, checks);
    } else if (dice < 89) {
      alloc_.empty_cache();
    } else if (dice < 91) {
      change_budget(rng);
    } else if (!checks.empty()) {
      finish_check(checks.front(), /*wait=*/dice < 95);
      if (checks.front().copy == nullptr) checks.erase(checks.begin());
    }
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

  void allocate_one(std::mt19937_64& rng, std::map<void*, live_block>& mine) {
    if (mine.size() >= 12) return;
    const std::size_t bytes = random_size(rng);
    const stream_id stream = streams_[rng() % streams_.size()];
    void* p = nullptr;
    allocating_ = true;
    try {
      p = alloc_.allocate(bytes, stream);
    } catch (const out_of_memory&) {
      counts.ooms++;
    }
    allocating_ = false;
    if (p == nullptr) return;
    counts.allocs++;
    check_not_guarded(reinterpret_cast<std::uintptr_t>(p), bytes);
    // The stamp stands for a kernel on `stream`: reuse on the same stream is
    // stream-ordered, so a host write must first wait for the stream's earlier
    // work (a copy still reading the block's previous contents, say).
    rig_.dev.synchronize(stream);
    const std::uint64_t id = next_id_++;
    auto* bytes_ptr = static_cast<unsigned char*>(p);
    for_each_stamped(bytes, [&](std::size_t i) { bytes_ptr[i] = stamp(id, i); });
    mine.emplace(p, live_block{id, bytes, stream, {}});
  }

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

  void use_on_other_stream(std::mt19937_64& rng, void* p, live_block& b, std::vector<pending_check>& checks) {
    const stream_id other = streams_[rng() % streams_.size()];
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

  void change_budget(std::mt19937_64& rng) {
    const std::size_t budgets[] = {128 * MiB, 256 * MiB, 512 * MiB, 768 * MiB};
    const auto before = alloc_.budget();
    const bool unlimited = rng() % 5 == 0;
    const std::size_t b = budgets[rng() % 4];
    try {
      alloc_.set_budget(unlimited ? std::nullopt : std::optional<std::size_t>(b));
    } catch (const invalid_argument&) {
      counts.budget_refusals++;  // the old budget must stay; another thread may have set one meanwhile
      (void)before;
    }
  }

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

  // Requires: the model lock held exclusively (no worker mid-operation).
  void check_invariants() {
    const auto snap = alloc_.snapshot();
    const auto s = alloc_.stats();
    std::int64_t reserved = 0, allocated = 0, active = 0, inactive_split = 0, n_alloc = 0;
    std::int64_t n_active = 0, n_inactive_split = 0;
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spans;
    const std::size_t g = rig_.dev.granularity();
    for (const auto& seg : snap) {
      reserved += std::int64_t(seg.total_size);
      // With expandable segments, a plain segment is the fallback of Note
      // [Expandable segments], "Less than a granule"; without, nothing is expandable.
      if (seg.expandable && !alloc_.expandable_segments()) counts.invariant_failures++;
      if (seg.expandable && (seg.address % g != 0 || seg.total_size % g != 0)) {
        ADD_FAILURE() << "a mapped range of " << seg.total_size << " B at " << seg.address << " is not whole granules";
        counts.invariant_failures++;
      }
      std::uintptr_t next = seg.address;
      for (const auto& b : seg.blocks) {
        if (b.address != next) counts.invariant_failures++;
        next = b.address + b.size;
        if (b.state == block_state::active_allocated) {
          allocated += std::int64_t(b.size);
          ++n_alloc;
          spans.emplace_back(b.address, b.address + b.size);
        }
        if (b.state != block_state::inactive) {
          active += std::int64_t(b.size);
          ++n_active;
        }
        if (b.state == block_state::inactive && seg.blocks.size() > 1) {
          inactive_split += std::int64_t(b.size);
          ++n_inactive_split;
        }
      }
      if (next != seg.address + seg.total_size) counts.invariant_failures++;
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      if (spans[i].first < spans[i - 1].second) counts.invariant_failures++;
    }
    const bool ok = reserved == s.reserved_bytes.all().current && allocated == s.allocated_bytes.all().current &&
                    active == s.active_bytes.all().current &&
                    inactive_split == s.inactive_split_bytes.all().current &&
                    n_alloc == s.allocation.all().current && n_active == s.active.all().current &&
                    n_inactive_split == s.inactive_split.all().current &&
                    std::int64_t(snap.size()) == s.segment.all().current &&
                    (s.budget < 0 || reserved <= s.budget);
    const memory_info m = rig_.dev.memory();
    if (alloc_.expandable_segments() && std::int64_t(m.total_bytes - m.free_bytes) != reserved) {
      ADD_FAILURE() << "the device has " << m.total_bytes - m.free_bytes << " B mapped, the allocator reserves "
                    << reserved;
      counts.invariant_failures++;
    }
    if (!ok) {
      ADD_FAILURE() << "statistics disagree with the blocks: reserved " << reserved << "/"
                    << s.reserved_bytes.all().current << ", allocated " << allocated << "/"
                    << s.allocated_bytes.all().current << ", active " << active << "/"
                    << s.active_bytes.all().current << ", inactive_split " << inactive_split << "/"
                    << s.inactive_split_bytes.all().current << " (" << n_inactive_split << "/"
                    << s.inactive_split.all().current << " blocks), segments " << snap.size() << "/"
                    << s.segment.all().current;
      counts.invariant_failures++;
    }
  }

  void finish() {
    for (const guard& g : guards_) rig_.dev.destroy_event(g.event);
    check_invariants();
    const auto s = alloc_.stats();
    counts.device_allocs = s.num_device_alloc;
    counts.device_frees = s.num_device_free;
    EXPECT_EQ(s.allocated_bytes.all().current, 0);
    alloc_.empty_cache();
    EXPECT_EQ(alloc_.stats().reserved_bytes.all().current, 0);
  }

  // segment_listener: called on the allocating thread with the allocator's
  // lock held.
  void on_segment_alloc(std::uintptr_t, std::size_t, stream_id) noexcept override {}
  void on_segment_free(std::uintptr_t, std::size_t, stream_id) noexcept override {
    if (allocating_) counts.frees_to_fit++;
  }

  static inline thread_local bool allocating_ = false;  // inside alloc_.allocate
  std::uint64_t seed_;
  int workers_;
  long ops_per_worker_;
  int check_every_;
  simulated_rig rig_;
  caching_allocator alloc_;
  std::vector<stream_id> streams_;
  std::shared_mutex model_mutex_;
  std::mutex guard_mutex_;
  std::vector<guard> guards_;
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<int> workers_ended_{0};  // workers past their last step
};

}  // namespace tp::testing
