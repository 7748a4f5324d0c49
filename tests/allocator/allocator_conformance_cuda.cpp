// The allocator conformance suite on the CUDA device (label gpu). Skips, with
// a message, where no CUDA device is present.

#include "allocator_conformance.hpp"
#include "device/cuda/cuda_device.hpp"

namespace tp::testing {
namespace {

std::unique_ptr<device> open_cuda() {
  if (cuda_device::device_count() == 0) return nullptr;
  return cuda_device::open(0);
}

INSTANTIATE_TEST_SUITE_P(Cuda, AllocatorConformance, ::testing::Values(device_factory{"cuda", &open_cuda}),
                         device_factory_name);

}  // namespace
}  // namespace tp::testing
