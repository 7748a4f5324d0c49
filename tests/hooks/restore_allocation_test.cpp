// A restore allocates through the adapter's runtime_resources
// (allocate_on: the tensor's device and stream, Note [Restores
// allocate for the tensor's device and stream] in hooks/runtime_host.hpp),
// not through whatever device and stream are current. On the CPU adapter,
// with the function supplied by the test.

#include <cstddef>
#include <memory>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "hooks/installed_adapter.hpp"
#include "hooks/budget/budget_session.hpp"
#include "hooks/budget/saved_storage.hpp"
#include "hooks/tensorpager.hpp"
#include "hooks_test_support.hpp"

namespace tp::hooks::testing {
namespace {

using RestoreAllocation = uninstalled_fixture;

TEST_F(RestoreAllocation, GoesThroughTheSessionsAllocateOnForTheTensorsStream) {
  tensorpager::install("device:cpu");
  installed_adapter a = installed_adapter_now();
  runtime_resources res = a.host.runtime_resources_now();
  ASSERT_TRUE(res.allocate_on);
  int restores = 0;
  res.allocate_on = [&](const device_request& r) {
    ++restores;
    EXPECT_EQ(r.stream, res.compute) << "the stream the tensor was saved on";
    EXPECT_EQ(r.life, lifetime::transient) << "a saved activation";
    EXPECT_TRUE(r.may_reclaim);
    return a.allocator.raw_allocate(r.bytes);
  };
  const auto session = budget_session::create(res, a.allocator, {});

  at::Tensor t = at::randn({256, 256});
  const at::Tensor expected = t.clone();
  bool fresh = false;
  std::shared_ptr<saved_storage> s = session->adopt(t, &fresh);
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(fresh);
  t = at::Tensor();  // only the session holds the storage now
  const auto rt = session->runtime();
  ASSERT_TRUE(rt->offload(*s->id()));
  rt->poll();
  ASSERT_STREQ(s->state(), "on_host");
  EXPECT_EQ(restores, 0);

  s->make_resident();
  EXPECT_EQ(restores, 1);
  EXPECT_STREQ(s->state(), "resident");
  const at::Tensor back = at::empty({0}).set_(s->storage(), 0, {256, 256}, {256, 1});
  EXPECT_TRUE(at::equal(back, expected));
  session->close();
}

}  // namespace
}  // namespace tp::hooks::testing
