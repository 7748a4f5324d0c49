// The CPU adapter under real torch tensors: sizes reach the statistics, frees
// come back, the budget surfaces as c10::OutOfMemoryError, and torch ops
// (autograd, the intra-op thread pool) compute the same results.

#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/errors.hpp"
#include "hooks/tensorpager.hpp"
#include "hooks_test_support.hpp"

namespace tp::hooks::testing {
namespace {

using CpuAdapter = uninstalled_fixture;

TEST_F(CpuAdapter, EmptyOfKnownSizeRaisesAllocatedBytesAndFreeReturnsThem) {
  tensorpager::install("device:cpu,budget:64MiB");
  const std::int64_t base = allocated_bytes();
  {
    const at::Tensor a = at::empty({1024}, at::kFloat);  // 4096 B, a multiple of the 512 B rounding
    EXPECT_EQ(allocated_bytes(), base + 4096);
    const at::Tensor b = at::empty({3, 1024}, at::kDouble);  // 24 KiB
    EXPECT_EQ(allocated_bytes(), base + 4096 + 24576);
    EXPECT_EQ(stat_of("allocation.all.current"), 2);
  }
  EXPECT_EQ(allocated_bytes(), base);
  EXPECT_EQ(stat_of("allocated_bytes.all.peak"), base + 4096 + 24576);
  EXPECT_GT(reserved_bytes(), 0);  // cached, not returned
  tensorpager::empty_cache();
  EXPECT_EQ(reserved_bytes(), 0);
}

TEST_F(CpuAdapter, RequestedBytesKeepTheUnroundedSize) {
  tensorpager::install("device:cpu");
  const at::Tensor t = at::empty({1000}, at::kFloat);  // 4000 B, a 4096 B block
  EXPECT_EQ(allocated_bytes(), 4096);
  EXPECT_EQ(stat_of("requested_bytes.all.current"), 4000);
}

TEST_F(CpuAdapter, TensorsHoldTheirValues) {
  tensorpager::install("device:cpu,budget:64MiB");
  const at::Tensor x = at::arange(0, 100000, at::kFloat);
  const at::Tensor y = x * 2 + 1;
  EXPECT_EQ(y.sum().item<double>(), 2.0 * (99999.0 * 100000.0 / 2.0) + 100000.0);
  EXPECT_EQ(x.data_ptr<float>()[12345], 12345.0f);
}

TEST_F(CpuAdapter, TorchUsesTheAdapterAndGetsItsAllocatorBackOnUninstall) {
  c10::Allocator* before = c10::GetCPUAllocator();
  tensorpager::install("device:cpu");
  EXPECT_NE(c10::GetCPUAllocator(), before);
  tensorpager::uninstall();
  EXPECT_EQ(c10::GetCPUAllocator(), before);
}

TEST_F(CpuAdapter, BudgetBelowOneTensorThrowsOutOfMemoryWithTheFigures) {
  tensorpager::install("device:cpu,budget:1MiB");
  try {
    const at::Tensor t = at::empty({1 << 20}, at::kFloat);  // 4 MiB
    FAIL() << "expected c10::OutOfMemoryError";
  } catch (const c10::OutOfMemoryError& e) {
    const std::string msg = e.what_without_backtrace();
    EXPECT_NE(msg.find("tried to allocate"), std::string::npos) << msg;
    EXPECT_NE(msg.find("4.00 MiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Budget: 1.00 MiB"), std::string::npos) << msg;
  }
  EXPECT_EQ(stat_of("num_ooms"), 1);
  // What fits the budget still works after the failure.
  const at::Tensor small = at::ones({1024}, at::kFloat);
  EXPECT_EQ(small.sum().item<double>(), 1024.0);
}

TEST_F(CpuAdapter, SetBudgetAppliesToLaterAllocations) {
  tensorpager::install("device:cpu");
  EXPECT_EQ(tensorpager::budget(), std::nullopt);
  tensorpager::set_budget(std::size_t{4} << 20);
  EXPECT_EQ(tensorpager::budget(), std::size_t{4} << 20);
  EXPECT_EQ(stat_of("tensorpager.budget"), std::int64_t{4} << 20);
  EXPECT_THROW(at::empty({2 << 20}, at::kFloat), c10::OutOfMemoryError);  // 8 MiB
  tensorpager::set_budget(std::nullopt);
  EXPECT_NO_THROW(at::empty({2 << 20}, at::kFloat));
}

TEST_F(CpuAdapter, SetBudgetBelowWhatIsInUseIsRefusedAndChangesNothing) {
  tensorpager::install("device:cpu,budget:64MiB");
  const at::Tensor held = at::empty({4 << 20}, at::kFloat);  // 16 MiB in use
  EXPECT_THROW(tensorpager::set_budget(std::size_t{1} << 20), tp::invalid_argument);
  EXPECT_EQ(tensorpager::budget(), std::size_t{64} << 20);
}

TEST_F(CpuAdapter, RatioBudgetIsAShareOfTheSimulatedCapacity) {
  tensorpager::install("device:cpu,sim_capacity:1GiB,budget:0.25device");
  EXPECT_EQ(tensorpager::budget(), std::size_t{256} << 20);
}

TEST_F(CpuAdapter, SnapshotShowsTheTensorsBlock) {
  tensorpager::install("device:cpu");
  const at::Tensor t = at::empty({1024}, at::kFloat);
  const auto segments = tensorpager::snapshot();
  ASSERT_EQ(segments.size(), 1u);
  EXPECT_EQ(segments[0].pool, tp::pool_kind::small);
  EXPECT_EQ(segments[0].allocated_size, 4096u);
  const auto address = reinterpret_cast<std::uintptr_t>(t.data_ptr());
  bool found = false;
  for (const auto& b : segments[0].blocks) {
    if (b.address == address) {
      found = true;
      EXPECT_EQ(b.size, 4096u);
      EXPECT_EQ(b.state, tp::block_state::active_allocated);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(CpuAdapter, MemorySummaryNamesTheDeviceAndTheRows) {
  tensorpager::install("device:cpu,budget:64MiB");
  const at::Tensor t = at::empty({1024}, at::kFloat);
  const std::string summary = tensorpager::memory_summary();
  for (const char* expected : {"tensorpager", "cpu", "Allocated memory", "Reserved memory", "Active memory",
                               "Requested memory", "4.00 KiB", "64.00 MiB"}) {
    EXPECT_NE(summary.find(expected), std::string::npos) << expected << " missing from\n" << summary;
  }
}

TEST_F(CpuAdapter, TrainingStepGivesTheSameGradientsAsWithoutIt) {
  const auto step = [] {
    torch::manual_seed(0);
    torch::nn::Sequential model(torch::nn::Linear(64, 256), torch::nn::ReLU(), torch::nn::Linear(256, 10));
    const torch::Tensor x = torch::randn({128, 64});
    const torch::Tensor y = torch::randint(0, 10, {128});
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
    return grads;
  };
  const std::vector<torch::Tensor> expected = step();
  tensorpager::install("device:cpu,budget:256MiB");
  const std::vector<torch::Tensor> got = step();
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(got[i], expected[i])) << "parameter " << i;
  EXPECT_GT(stat_of("allocation.all.allocated"), 10);
}

}  // namespace
}  // namespace tp::hooks::testing
