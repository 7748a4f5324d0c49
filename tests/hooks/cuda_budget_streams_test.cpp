// The budget runtime's glue over the CUDA adapter, on fake devices: a tensor
// saved while a side stream is current is ordered on that stream (Note
// [Tensors used on several streams] in runtime/transfer_engine.hpp), not on
// the stream current when the budget began, which gives wrong gradients for a
// forward region on a busy side stream (measured on a GPU: docs/decisions.md).

#include <cstddef>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>
#include <gtest/gtest.h>

#include "hooks/budget/budget_session.hpp"
#include "hooks/budget/saved_storage.hpp"
#include "tests/hooks/cuda_adapter_fixture.hpp"

namespace tp::hooks::testing {
namespace {

using CudaBudgetStreams = CudaAdapterOverFakes;

/// A uint8 CUDA tensor over `dp` (no CUDA call: the storage is made by hand,
/// as torch makes one from the allocator).
at::Tensor cuda_tensor(c10::DataPtr dp, std::size_t bytes, c10::Allocator* allocator) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(dp), allocator, /*resizable=*/false);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                                          caffe2::TypeMeta::Make<std::uint8_t>());
  t.unsafeGetTensorImpl()->set_sizes_contiguous({static_cast<std::int64_t>(bytes)});
  return t;
}

TEST_F(CudaBudgetStreams, AnOffloadWaitsForTheStreamCurrentWhenTheTensorWasSaved) {
  constexpr std::size_t bytes = 1 * MiB;
  platform_->set_current_device(0);
  (void)adapter_->getMemoryInfo(0);  // opens cuda:0
  fake_cuda_device& dev0 = platform_->opened_device(0);
  // The budget begins with the default stream current ...
  const auto session = budget_session::create(adapter_->runtime_resources_now(), *adapter_, {});
  // ... and a forward region then runs on `side`, which is still busy.
  const stream_id side = dev0.create_stream();
  platform_->set_current_stream(0, side);
  c10::DataPtr dp = adapter_->allocate(bytes);
  void* p = dp.get();
  fill(p, bytes, 1);  // what the memory held before
  std::vector<unsigned char> produced(bytes);
  for (std::size_t i = 0; i < bytes; ++i) produced[i] = static_cast<unsigned char>(2 + i);
  platform_->hold(side);
  dev0.copy_async(p, produced.data(), bytes, side);  // the kernel that produces the tensor, queued
  at::Tensor t = cuda_tensor(std::move(dp), bytes, adapter_);
  bool fresh = false;
  const std::shared_ptr<saved_storage> s = session->adopt(t, &fresh);  // saved by an op on `side`
  ASSERT_NE(s, nullptr);
  ASSERT_TRUE(fresh);
  t = at::Tensor();  // only the session holds the storage now
  platform_->set_current_stream(0, default_stream);

  const auto rt = session->runtime();
  ASSERT_TRUE(rt->offload(*s->id()));
  rt->poll();
  EXPECT_STREQ(s->state(), "offloading") << "the offload copied before the work on `side` ran";
  platform_->release(side);
  dev0.synchronize(side);
  rt->poll();
  EXPECT_STREQ(s->state(), "on_host");
  s->make_resident();
  EXPECT_TRUE(holds(read(s->device_ptr(), bytes), 2)) << "the copy brought back what was there before `side` ran";
  session->close();
}

}  // namespace
}  // namespace tp::hooks::testing
