#pragma once
// The device conformance suite: TEST_P cases (device_conformance.cpp,
// device_conformance_copies.cpp) that every tp::device must pass, on a GPU or
// simulated. A device's test file instantiates them with its factory:
//   INSTANTIATE_TEST_SUITE_P(Cuda, DeviceConformance,
//                            ::testing::Values(tp::testing::device_factory{"cuda", ...}),
//                            tp::testing::device_factory_name);
// and links the tp_device_conformance target. The cases use only the
// tp::device interface: device memory is read and written through copies from
// page-locked host buffers, never dereferenced by the host.

#include <gtest/gtest.h>

#include <memory>

#include "device/device.hpp"
#include "tests/device/device_factory.hpp"

class DeviceConformance : public ::testing::TestWithParam<tp::testing::device_factory> {
 protected:
  void SetUp() override {
    dev_ = GetParam().make();
    if (dev_ == nullptr) GTEST_SKIP() << "no " << GetParam().name << " device present";
  }

  std::unique_ptr<tp::device> dev_;
};
