#pragma once
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
// The allocator, the model of its blocks and the checks are fuzz_harness's
// (caching_allocator_fuzz_harness.hpp); this file draws the operations. With
// one worker it also records them as a literal list (fuzz_op), which
// run_fuzz_ops runs again without the driver thread (Note [Fuzz regressions
// are literal lists] in caching_allocator_fuzz_test.cpp).
// The harness only: the cases, and the seeds they run, are in
// caching_allocator_fuzz_test.cpp.

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "caching_allocator_fuzz_harness.hpp"
#include "caching_allocator_fuzz_ops.hpp"

namespace tp::testing {

class fuzz_run {
 public:
  fuzz_run(std::uint64_t seed, int workers, long ops, int global_check_every, bool expandable)
      : h_(expandable), counts(h_.counts), seed_(seed), workers_(workers), ops_per_worker_(ops / workers),
        check_every_(global_check_every) {}

  void run() {
    std::atomic<bool> done{false};
    std::thread driver([&] { drive_streams(done); });
    std::vector<std::thread> threads;
    for (int w = 0; w < workers_; ++w) threads.emplace_back([this, w] { work(w); });
    for (auto& t : threads) t.join();
    done = true;
    driver.join();
    for (int s = 0; s < fuzz_harness::stream_count; ++s) h_.device().release_stream(h_.stream(s));
    h_.finish();
  }

  /// With one worker, what it did, in order (its final frees and waits
  /// included); empty with more.
  const std::vector<fuzz_op>& recorded() const { return recorded_; }

 private:
  fuzz_harness h_;

 public:
  fuzz_counts& counts;

 private:
  // Holds and releases streams at random, like GPU work finishing late.
  void drive_streams(std::atomic<bool>& done) {
    std::mt19937_64 rng(seed_ ^ 0xD1B54A32D192ED03ull);
    simulated_device& dev = h_.device();
    while (!done) {
      const stream_id s = h_.stream(1 + static_cast<int>(rng() % 3));
      dev.hold_stream(s);
      std::this_thread::sleep_for(std::chrono::microseconds(5 + rng() % 60));
      dev.release_stream(s);
      dev.poll();
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 30));
    }
  }

  std::size_t random_size(std::mt19937_64& rng) {
    const double e = std::uniform_real_distribution<double>(0.0, 26.0)(rng);  // 1 B .. 64 MiB
    return std::max<std::size_t>(1, static_cast<std::size_t>(std::exp2(e)));
  }

  void record(fuzz_op op) {
    if (workers_ == 1) recorded_.push_back(op);
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
        h_.check_invariants();
      }
    }
    workers_ended_++;
    // Under the model lock like every other step: another worker may be
    // checking the invariants (a snapshot and the statistics, read apart).
    std::shared_lock step(model_mutex_);
    for (auto& [ptr, b] : mine) {
      record({fuzz_op::free, static_cast<std::uint64_t>(b.alloc_op)});
      h_.release(ptr, b);
    }
    for (auto& c : checks) {
      record({fuzz_op::check, 0, 1});
      h_.finish_check(c, /*wait=*/true);
    }
  }

  void step_once(std::mt19937_64& rng, std::map<void*, live_block>& mine, std::vector<pending_check>& checks) {
    const unsigned dice = static_cast<unsigned>(rng() % 100);
    if (dice < 42 || mine.empty()) {
      allocate_one(rng, mine);
    } else if (dice < 75) {
      auto it = std::next(mine.begin(), static_cast<long>(rng() % mine.size()));
      record({fuzz_op::free, static_cast<std::uint64_t>(it->second.alloc_op)});
      h_.release(it->first, it->second);
      mine.erase(it);
    } else if (dice < 87) {
      auto it = std::next(mine.begin(), static_cast<long>(rng() % mine.size()));
      const int other = static_cast<int>(rng() % fuzz_harness::stream_count);
      record({fuzz_op::use, static_cast<std::uint64_t>(it->second.alloc_op), 0, other});
      h_.use(it->first, it->second, other, checks);
    } else if (dice < 89) {
      record({fuzz_op::empty_cache});
      h_.empty_cache();
    } else if (dice < 91) {
      change_budget(rng);
    } else if (!checks.empty()) {
      record({fuzz_op::check, 0, dice < 95 ? 1u : 0u});
      h_.finish_check(checks.front(), /*wait=*/dice < 95);
      if (checks.front().copy == nullptr) checks.erase(checks.begin());
    }
    h_.after_step(checks);
  }

  void allocate_one(std::mt19937_64& rng, std::map<void*, live_block>& mine) {
    if (mine.size() >= 12) return;
    const std::size_t bytes = random_size(rng);
    const int stream = static_cast<int>(rng() % fuzz_harness::stream_count);
    const long op = allocs_++;
    record({fuzz_op::alloc, static_cast<std::uint64_t>(op), bytes, stream});
    live_block b{};
    void* p = h_.allocate(bytes, stream, b);
    if (p == nullptr) return;
    b.alloc_op = op;
    mine.emplace(p, b);
  }

  void change_budget(std::mt19937_64& rng) {
    const std::size_t budgets[] = {128 * MiB, 256 * MiB, 512 * MiB, 768 * MiB};
    const bool unlimited = rng() % 5 == 0;
    const std::size_t b = budgets[rng() % 4];
    record({fuzz_op::set_budget, 0, unlimited ? 0 : b});
    h_.set_budget(unlimited ? std::nullopt : std::optional<std::size_t>(b));
  }

  std::uint64_t seed_;
  int workers_;
  long ops_per_worker_;
  int check_every_;
  std::shared_mutex model_mutex_;
  std::atomic<int> workers_ended_{0};  // workers past their last step
  std::atomic<long> allocs_{0};        // alloc ops drawn (with one worker: the block numbers of fuzz_op)
  std::vector<fuzz_op> recorded_;
};

}  // namespace tp::testing
