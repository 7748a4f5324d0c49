// The allocator conformance suite on the simulated device.

#include "allocator_conformance.hpp"
#include "core/clock.hpp"
#include "device/simulated_device.hpp"

namespace tp::testing {
namespace {

/// Owns the clock beside the device, so the factory's product is self-contained.
class clocked_simulated_device final {
 public:
  static std::unique_ptr<device> make() {
    static manual_clock clk;  // blocking waits jump it; shared by all instances
    simulated_device::options o;
    o.capacity_bytes = std::size_t{2} << 30;
    return std::make_unique<simulated_device>(o, clk);
  }
};

INSTANTIATE_TEST_SUITE_P(Simulated, AllocatorConformance,
                         ::testing::Values(device_factory{"simulated", &clocked_simulated_device::make}),
                         device_factory_name);

}  // namespace
}  // namespace tp::testing
