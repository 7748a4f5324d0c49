// Randomised operation sequences against the runtime: track, access, offload,
// untrack, reclaim, step, poll, advance the clock, switch policy, under a
// random budget and copy-cost model. After every operation the invariants
// hold and every tensor with device storage has its exact bytes.
// TP_FUZZ_SEED fixes the seed (printed on every run); TP_FUZZ_OPS the length.

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "core/errors.hpp"
#include "runtime/runtime.hpp"
#include "runtime_test_support.hpp"

namespace tp {
namespace {

using namespace tp::testing;

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::strtoull(v, nullptr, 10) : fallback;
}

struct live {
  std::unique_ptr<fake_binding> binding;
  tensor_id id;
};

void run_fuzz(std::uint64_t seed, std::uint64_t ops) {
  std::printf("runtime fuzz: TP_FUZZ_SEED=%llu TP_FUZZ_OPS=%llu\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(ops));
  SCOPED_TRACE(::testing::Message() << "TP_FUZZ_SEED=" << seed);
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  runtime_rig::config c;
  c.budget = std::size_t{uniform(2, 12)} * MiB;
  c.latency_ns = std::int64_t(uniform(0, 3)) * 1000;
  c.bandwidth = uniform(0, 1) == 0 ? 0.0 : 4e9;
  if (uniform(0, 3) == 0) c.host_budget = std::size_t{uniform(1, 8)} * MiB;
  // Segments from a generator of their own, so that a seed's operations stay
  // what they were before they were drawn.
  std::mt19937_64 layout(seed ^ 0x6167'6172'6e75'6c65ULL);
  c.expandable = layout() % 2 == 0;
  runtime_rig rig(c);
  memory_runtime::options o;
  o.policy = static_cast<policy_kind>(uniform(0, 3));
  o.sample_size = std::size_t(uniform(1, 8));
  o.seed = seed;
  std::printf("runtime fuzz: expandable %d\n", int(c.expandable));
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  std::vector<live> tensors;
  std::uint64_t next_seed = 1;

  for (std::uint64_t op = 0; op < ops; ++op) {
    const std::uint64_t what = uniform(0, 99);
    try {
      if (what < 25 || tensors.empty()) {
        const std::size_t bytes = std::size_t(uniform(1, 384)) * KiB + std::size_t(uniform(0, 511));
        auto b = std::make_unique<fake_binding>(rig, bytes, next_seed++);
        const bool evictable = uniform(0, 9) != 0;
        const auto cost = uniform(0, 2) == 0 ? 0 : std::int64_t(uniform(1, 1'000'000));
        const tensor_id id = rt.track(*b, bytes, rig.compute, cost, evictable);
        tensors.push_back({std::move(b), id});
      } else if (what < 55) {
        live& t = tensors[uniform(0, tensors.size() - 1)];
        rt.access(t.id);
        ASSERT_TRUE(t.binding->verify()) << "stale bytes after access, op " << op;
      } else if (what < 65) {
        rt.offload(tensors[uniform(0, tensors.size() - 1)].id);
      } else if (what < 80) {
        const std::size_t i = uniform(0, tensors.size() - 1);
        rt.untrack(tensors[i].id);
        tensors[i] = std::move(tensors.back());
        tensors.pop_back();
      } else if (what < 85) {
        rt.reclaim(std::size_t(uniform(1, 8)) * MiB, rig.compute);
      } else if (what < 90) {
        rt.step();
      } else if (what < 97) {
        rig.clk.advance(std::int64_t(uniform(0, 5000)));
        rt.poll();
      } else {
        rt.set_policy(static_cast<policy_kind>(uniform(0, 3)));
      }
    } catch (const out_of_memory&) {
      // The budget cannot hold this: the state must still be whole.
    }
    ASSERT_NO_THROW(rt.check_invariants()) << "op " << op;
    {
      const auto reserved = static_cast<std::size_t>(rig.alloc.stats().reserved_bytes.all().current);
      ASSERT_LE(reserved, *c.budget);
    }
    if (op % 64 != 0) continue;  // full byte check every 64 ops; touched tensors every op
    for (live& t : tensors) {
      const tensor_state s = rt.state(t.id);
      if (s == tensor_state::resident || s == tensor_state::offloading) {
        ASSERT_TRUE(t.binding->verify()) << "stale bytes in " << to_string(s) << ", op " << op;
      }
    }
  }
  // Everything still tracked comes back intact.
  for (live& t : tensors) {
    try {
      rt.access(t.id);
      EXPECT_TRUE(t.binding->verify());
    } catch (const out_of_memory&) {
    }
    rt.untrack(t.id);
  }
}

TEST(RuntimeFuzz, RandomOperationsKeepInvariantsAndBytes) {
  const std::uint64_t ops = env_or("TP_FUZZ_OPS", 2000);
  if (const char* s = std::getenv("TP_FUZZ_SEED")) {
    run_fuzz(std::strtoull(s, nullptr, 10), ops);
    return;
  }
  const std::uint64_t base = std::random_device{}();
  for (std::uint64_t i = 0; i < 4 && !HasFatalFailure(); ++i) run_fuzz(base + i, ops);
}

TEST(RuntimeFuzz, FixedSeedsStayGreen) {
  for (std::uint64_t seed : {1ULL, 2ULL, 3ULL, 42ULL}) {
    run_fuzz(seed, 1500);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace tp
