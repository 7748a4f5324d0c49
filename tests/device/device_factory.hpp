#pragma once
// A named way to build a device, so that one conformance suite runs over every
// device implementation (RMM's typed-suite habit). make() returns nullptr when
// the device is not present here (no GPU); suites then skip with a message.

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "device/device.hpp"

namespace tp::testing {

struct device_factory {
  std::string name;
  std::function<std::unique_ptr<tp::device>()> make;
};

inline std::ostream& operator<<(std::ostream& os, const device_factory& f) { return os << f.name; }

/// For INSTANTIATE_TEST_SUITE_P(..., device_factory_name).
inline std::string device_factory_name(const ::testing::TestParamInfo<device_factory>& info) {
  return info.param.name;
}

}  // namespace tp::testing
