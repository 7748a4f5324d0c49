// The install rules of tensorpager.hpp: idempotence, conflicts, uninstall and
// reinstall, the environment variable, the backend key, errors when nothing
// is installed.

#include <cstdlib>
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "hooks/tensorpager.hpp"
#include "hooks_test_support.hpp"

namespace tp::hooks::testing {
namespace {

using Install = uninstalled_fixture;

TEST_F(Install, InstallsAndReportsTheConfiguration) {
  EXPECT_FALSE(tensorpager::is_installed());
  EXPECT_EQ(tensorpager::current_config(), "");
  tensorpager::install("device:cpu,budget:64MiB");
  EXPECT_TRUE(tensorpager::is_installed());
  EXPECT_EQ(tensorpager::device_kind(), "cpu");
  const std::string text = tensorpager::current_config();
  EXPECT_NE(text.find("device:cpu"), std::string::npos) << text;
  EXPECT_NE(text.find("budget:"), std::string::npos) << text;
}

TEST_F(Install, SecondInstallWithTheSameConfigurationDoesNothing) {
  tensorpager::install("device:cpu,budget:64MiB");
  const at::Tensor t = at::empty({1024}, at::kFloat);
  EXPECT_NO_THROW(tensorpager::install("budget:64MiB,device:cpu"));  // equal, written differently
  EXPECT_EQ(allocated_bytes(), 4096);  // same adapter, same statistics
}

TEST_F(Install, SecondInstallWithAnotherConfigurationIsAConfigError) {
  tensorpager::install("device:cpu,budget:64MiB");
  try {
    tensorpager::install("device:cpu,budget:32MiB");
    FAIL() << "expected tp::config_error";
  } catch (const tp::config_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("already installed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("set_budget"), std::string::npos) << msg;
  }
  EXPECT_EQ(tensorpager::budget(), std::size_t{64} << 20);
}

TEST_F(Install, MalformedConfigurationIsAConfigErrorAndInstallsNothing) {
  EXPECT_THROW(tensorpager::install("device:cpu,budget:lots"), tp::config_error);
  EXPECT_THROW(tensorpager::install("device:cpu,no_such_key:1"), tp::config_error);
  EXPECT_FALSE(tensorpager::is_installed());
}

TEST_F(Install, ReinstallAfterUninstallTakesANewConfiguration) {
  tensorpager::install("device:cpu,budget:64MiB");
  at::Tensor old = at::empty({1024}, at::kFloat);
  tensorpager::uninstall();
  EXPECT_FALSE(tensorpager::is_installed());
  tensorpager::install("device:cpu,budget:32MiB");
  EXPECT_EQ(tensorpager::budget(), std::size_t{32} << 20);
  EXPECT_EQ(allocated_bytes(), 0);  // the old tensor belongs to the first adapter
  old = at::Tensor();               // freed by the adapter that made it
  EXPECT_EQ(allocated_bytes(), 0);
  const at::Tensor fresh = at::empty({1024}, at::kFloat);
  EXPECT_EQ(allocated_bytes(), 4096);
}

TEST_F(Install, TensorsFromBeforeInstallAreFreedByTheirOwnAllocator) {
  at::Tensor before = at::ones({4096}, at::kFloat);
  tensorpager::install("device:cpu");
  EXPECT_EQ(allocated_bytes(), 0);
  const at::Tensor copy = before.clone();  // allocated by tensorpager
  EXPECT_EQ(allocated_bytes(), 16384);
  before = at::Tensor();
  EXPECT_EQ(allocated_bytes(), 16384);
  EXPECT_EQ(copy.sum().item<double>(), 4096.0);
}

TEST_F(Install, EmptyTextReadsTensorpagerConf) {
  ::setenv("TENSORPAGER_CONF", "device:cpu,budget:32MiB", 1);
  tensorpager::install();
  ::unsetenv("TENSORPAGER_CONF");
  EXPECT_TRUE(tensorpager::is_installed());
  EXPECT_EQ(tensorpager::budget(), std::size_t{32} << 20);
}

TEST_F(Install, ErrorsInTensorpagerConfNameTheVariable) {
  ::setenv("TENSORPAGER_CONF", "device:cpu,budget:-1", 1);
  try {
    tensorpager::install();
    ::unsetenv("TENSORPAGER_CONF");
    FAIL() << "expected tp::config_error";
  } catch (const tp::config_error& e) {
    ::unsetenv("TENSORPAGER_CONF");
    EXPECT_NE(std::string(e.what()).find("TENSORPAGER_CONF"), std::string::npos) << e.what();
  }
}

TEST_F(Install, AnotherBackendLeavesPyTorchsAllocator) {
  tensorpager::install("backend:native,device:cpu");
  EXPECT_FALSE(tensorpager::is_installed());
}

TEST_F(Install, QueriesWithoutAnInstallThrowTpError) {
  EXPECT_THROW(tensorpager::stats(), tp::error);
  EXPECT_THROW(tensorpager::budget(), tp::error);
  EXPECT_THROW(tensorpager::set_budget(std::size_t{1} << 20), tp::error);
  EXPECT_THROW(tensorpager::device_kind(), tp::error);
  EXPECT_NO_THROW(tensorpager::uninstall());
}

TEST_F(Install, BudgetScopeRestoresThePreviousBudget) {
  tensorpager::install("device:cpu,budget:64MiB");
  {
    tensorpager::budget_scope scope(std::size_t{8} << 20);
    EXPECT_EQ(tensorpager::budget(), std::size_t{8} << 20);
  }
  EXPECT_EQ(tensorpager::budget(), std::size_t{64} << 20);
}

#if !TP_HOOKS_WITH_CUDA
TEST_F(Install, CudaNeedsACudaBuild) {
  try {
    tensorpager::install("device:cuda");
    FAIL() << "expected tp::config_error";
  } catch (const tp::config_error& e) {
    EXPECT_NE(std::string(e.what()).find("TP_WITH_CUDA"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(tensorpager::is_installed());
}
#endif

}  // namespace
}  // namespace tp::hooks::testing
