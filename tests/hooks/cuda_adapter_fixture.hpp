#pragma once
// The fixture of the CPU tests of cuda_adapter: a fresh adapter over a
// fake_cuda_platform of two devices, never installed (installing is
// process-wide; the test that installs does it in a child process). Adapters
// are never destroyed (Note [CUDA adapter installation]), so each test leaks
// one with its platform and the few MiB of simulated memory it used.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>

#include "config/config.hpp"
#include "hooks/cuda_adapter.hpp"
#include "tests/hooks/fake_cuda_platform.hpp"

namespace tp::hooks::testing {

inline constexpr std::size_t MiB = std::size_t{1} << 20;

class CudaAdapterOverFakes : public ::testing::Test {
 protected:
  // Plain segments, as these tests were written for: the fakes support
  // virtual memory, and expandable segments (the default) map
  // granules instead of allocating segments. The allocator's conformance
  // suites cover expandable segments over the same kind of device.
  void SetUp() override { make("device:cuda,expandable_segments:False"); }

  /// Replaces the adapter with one for `conf`.
  void make(const char* conf) {
    auto platform = std::make_unique<fake_cuda_platform>(2);
    platform_ = platform.get();
    adapter_ = &cuda_adapter::create(parse_config(conf, "test"), std::move(platform));
    adapter_->init(2);
  }

  /// A CUDAStream for a stream handle of `device` (as torch wraps one it did
  /// not create; no CUDA call).
  static c10::cuda::CUDAStream cuda_stream(stream_id s, c10::DeviceIndex device) {
    return c10::cuda::getStreamFromExternal(reinterpret_cast<cudaStream_t>(to_underlying(s)), device);
  }
  static cudaStream_t raw(stream_id s) { return reinterpret_cast<cudaStream_t>(to_underlying(s)); }

  /// Writes `bytes` bytes of seed + i to device memory at dst and waits.
  void fill(void* dst, std::size_t bytes, unsigned char seed) {
    std::vector<unsigned char> host(bytes);
    for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(seed + i);
    platform_->sim().copy_async(dst, host.data(), bytes, default_stream);
    platform_->sim().synchronize(default_stream);
  }
  /// Reads `bytes` bytes of device memory at src.
  std::vector<unsigned char> read(const void* src, std::size_t bytes) {
    std::vector<unsigned char> host(bytes);
    platform_->sim().copy_async(host.data(), src, bytes, default_stream);
    platform_->sim().synchronize(default_stream);
    return host;
  }
  static bool holds(const std::vector<unsigned char>& data, unsigned char seed) {
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (data[i] != static_cast<unsigned char>(seed + i)) return false;
    }
    return true;
  }

  /// The stream of the segment holding ptr on `device` (blocks keep their
  /// segment's stream), from the adapter's snapshot.
  std::optional<stream_id> segment_stream(int device, const void* ptr) {
    const auto address = reinterpret_cast<std::size_t>(ptr);
    for (const auto& seg : adapter_->snapshot({0, 0}, false).segments) {
      if (seg.device == device && address >= seg.address && address < seg.address + seg.total_size) {
        return stream_id{reinterpret_cast<std::uintptr_t>(seg.stream)};
      }
    }
    return std::nullopt;
  }

  fake_cuda_platform* platform_ = nullptr;
  cuda_adapter* adapter_ = nullptr;
};

}  // namespace tp::hooks::testing
