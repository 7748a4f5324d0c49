#include "sim/contentless_device.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/errors.hpp"

namespace tp::sim {
namespace {

constexpr std::size_t alignment = 512;  // as simulated_device's allocations
// Address space per arena: ranges are never reused, so it must cover every
// allocation of one run, not only the peak.
constexpr std::size_t reserve_bytes = std::size_t{1} << 44;  // 16 TiB

std::size_t round_up(std::size_t n) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

contentless_device::arena::arena(std::size_t capacity, const char* what) : capacity_(capacity) {
  void* p = mmap(nullptr, reserve_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw error(fmt::format("contentless_device: reserving {} bytes of address space for {} failed: {}",
                            reserve_bytes, what, std::strerror(errno)));
  }
  base_ = static_cast<std::byte*>(p);
}

contentless_device::arena::~arena() { munmap(base_, reserve_bytes); }

void* contentless_device::arena::take(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes);
  if (used_ + size > capacity_) return nullptr;
  if (next_ + size > reserve_bytes) {
    throw error(fmt::format("contentless_device: {} bytes of address space used up (ranges are not reused)",
                            reserve_bytes));
  }
  void* p = base_ + next_;
  next_ += size;
  used_ += size;
  return p;
}

void contentless_device::arena::give(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes);
  const auto* p = static_cast<std::byte*>(ptr);
  if (p < base_ || p + size > base_ + next_ || size > used_) {
    std::fprintf(stderr, "contentless_device: free of %p (%zu bytes) it did not hand out\n", ptr, bytes);
    std::abort();
  }
  used_ -= size;
}

std::size_t contentless_device::arena::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

contentless_device::contentless_device(simulated_device& inner, std::size_t capacity, std::size_t host_capacity)
    : inner_(inner), device_(capacity, "device memory"), host_(host_capacity, "pinned host memory")  {
  if (inner.opts().copy_contents) {
    throw invalid_argument(
        "contentless_device: the wrapped simulated_device must be built with copy_contents = false");
  }
}

contentless_device::~contentless_device() = default;

memory_info contentless_device::memory() const {
  return {device_.capacity() - device_.used(), device_.capacity()};
}

}  // namespace tp::sim
