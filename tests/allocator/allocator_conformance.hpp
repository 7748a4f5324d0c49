#pragma once
// The allocator conformance suite: behaviour every device must give the
// caching allocator. Instantiated once per device implementation
// (allocator_conformance_simulated.cpp; the CUDA device's gpu-labelled test).
// Device memory is touched only through copy_async, so it runs on a GPU too.

#include <gtest/gtest.h>

#include <memory>

#include "allocator/caching_allocator.hpp"
#include "tests/device/device_factory.hpp"

namespace tp::testing {

class AllocatorConformance : public ::testing::TestWithParam<device_factory> {
 protected:
  void SetUp() override {
    dev_ = GetParam().make();
    if (!dev_) GTEST_SKIP() << "no " << GetParam().name << " device present";
  }
  std::unique_ptr<device> dev_;
};

}  // namespace tp::testing
