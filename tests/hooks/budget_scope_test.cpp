// tensorpager::budget_scope, step() and runtime_stats(), and explicit
// offload/restore (tensorpager_torch.hpp) on the CPU adapter with real torch
// tensors.

#include <cstdint>
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "hooks/tensorpager.hpp"
#include "hooks/tensorpager_torch.hpp"
#include "hooks_test_support.hpp"

namespace tp::hooks::testing {
namespace {

using BudgetScope = uninstalled_fixture;

constexpr std::size_t MiB = std::size_t{1} << 20;

TEST_F(BudgetScope, OffloadedTensorComesBackBitIdenticalAndItsBlockIsFreed) {
  tensorpager::install("device:cpu");
  tensorpager::budget_scope scope(std::size_t{256} * MiB);
  EXPECT_TRUE(tensorpager::budget_active());
  at::Tensor t = at::randn({1024, 1024});  // 4 MiB
  const at::Tensor expected = t.clone();
  const auto before = tensorpager::stats().at("allocated_bytes.all.current");
  auto handle = tensorpager::offload(std::move(t));
  EXPECT_FALSE(t.defined());
  EXPECT_EQ(handle.state(), "on_host");  // the simulated copy has retired, the block is back
  EXPECT_EQ(tensorpager::stats().at("allocated_bytes.all.current"), before - std::int64_t(4 * MiB));
  const at::Tensor back = tensorpager::restore(handle);
  EXPECT_TRUE(at::equal(back, expected));
  EXPECT_EQ(handle.state(), "resident");
  const auto rs = tensorpager::runtime_stats();
  EXPECT_EQ(rs.at("tensorpager.runtime.offloaded_bytes"), std::int64_t(4 * MiB));
  EXPECT_EQ(rs.at("tensorpager.runtime.prefetched_bytes"), std::int64_t(4 * MiB));
}

TEST_F(BudgetScope, AStorageStillHeldElsewhereIsNotOffloaded) {
  tensorpager::install("device:cpu");
  tensorpager::budget_scope scope(std::nullopt);
  at::Tensor t = at::randn({256, 256});
  const at::Tensor view = t.view({-1});  // shares the storage
  auto handle = tensorpager::offload(std::move(t));
  EXPECT_EQ(handle.state(), "resident");
  EXPECT_TRUE(at::equal(tensorpager::restore(handle).view({-1}), view));
}

TEST_F(BudgetScope, EvictsUnderTheBudgetAndRestoresOnEnd) {
  tensorpager::install("device:cpu");
  std::vector<tensorpager::offloaded_tensor> handles;
  // Contents that can be made again without holding a copy under the budget.
  auto contents = [](int i) { return at::arange(i * 1048576, (i + 1) * 1048576, at::kFloat).view({1024, 1024}); };
  {
    tensorpager::budget_options o;
    o.bytes = 48 * MiB;
    o.policy = "lru";
    tensorpager::budget_scope scope(o);
    for (int i = 0; i < 16; ++i) {  // 16 x 4 MiB handed to the runtime under a 48 MiB budget
      handles.push_back(tensorpager::offload(contents(i)));
      tensorpager::step();
    }
    EXPECT_LE(tensorpager::stats().at("reserved_bytes.all.peak"), std::int64_t(48 * MiB));
  }
  EXPECT_FALSE(tensorpager::budget_active());
  for (std::size_t i = 0; i < handles.size(); ++i) {
    EXPECT_EQ(handles[i].state(), "unmanaged");
    EXPECT_TRUE(at::equal(tensorpager::restore(handles[i]), contents(static_cast<int>(i)))) << i;
  }
  EXPECT_EQ(tensorpager::runtime_stats().at("tensorpager.runtime.steps"), 16);
}

TEST_F(BudgetScope, BadRequestsChangeNothing) {
  tensorpager::install("device:cpu,budget:64MiB");
  EXPECT_THROW(tensorpager::offload(at::randn({4})), tp::error);  // no scope
  tensorpager::budget_options bad;
  bad.ratio = 1.5;
  EXPECT_THROW(tensorpager::budget_scope{bad}, tp::invalid_argument);
  bad = {};
  bad.policy = "fifo";
  EXPECT_THROW(tensorpager::budget_scope{bad}, tp::config_error);
  EXPECT_EQ(tensorpager::budget(), std::size_t{64} * MiB);
  {
    tensorpager::budget_scope scope(std::size_t{32} * MiB);
    EXPECT_THROW(tensorpager::budget_scope{std::size_t{16} * MiB}, tp::error);  // no nesting
    EXPECT_THROW(tensorpager::uninstall(), tp::error);  // not while a budget is active
    EXPECT_EQ(tensorpager::budget(), std::size_t{32} * MiB);
  }
  EXPECT_EQ(tensorpager::budget(), std::size_t{64} * MiB);
}

}  // namespace
}  // namespace tp::hooks::testing
