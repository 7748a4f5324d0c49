#include "sim/contentless_device.hpp"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
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
// The reservations' arena: expandable segments reserve at most 256 GiB each
// (caching_allocator.cpp), a few per run.
constexpr std::size_t reservation_bytes = std::size_t{1} << 42;  // 4 TiB

std::size_t round_up(std::size_t n) { return (n + alignment - 1) / alignment * alignment; }

}  // namespace

contentless_device::arena::arena(std::size_t capacity, const char* what, std::size_t address_space)
    : capacity_(capacity), space_(address_space) {
  void* p = mmap(nullptr, space_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    throw error(fmt::format("contentless_device: reserving {} bytes of address space for {} failed: {}",
                            space_, what, std::strerror(errno)));
  }
  base_ = static_cast<std::byte*>(p);
}

contentless_device::arena::~arena() { munmap(base_, space_); }

void* contentless_device::arena::take(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t size = round_up(bytes == 0 ? 1 : bytes);
  if (used_ + size > capacity_) return nullptr;
  if (next_ + size > space_) {
    throw error(fmt::format("contentless_device: {} bytes of address space used up (ranges are not reused)",
                            space_));
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

void contentless_device::arena::forget(std::size_t bytes) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  used_ -= std::min(used_, round_up(bytes == 0 ? 1 : bytes));
}

std::size_t contentless_device::arena::used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

contentless_device::contentless_device(simulated_device& inner, std::size_t capacity, std::size_t host_capacity)
    : inner_(inner),
      device_(capacity, "device memory", reserve_bytes),
      host_(host_capacity, "pinned host memory", reserve_bytes),
      reserved_(reservation_bytes, "reservations", reservation_bytes) {
  if (inner.opts().copy_contents) {
    throw invalid_argument(
        "contentless_device: the wrapped simulated_device must be built with copy_contents = false");
  }
}

contentless_device::~contentless_device() = default;

memory_info contentless_device::memory() const {
  const std::size_t used = std::min(device_.capacity(), device_.used() + mapped_.load());
  return {device_.capacity() - used, device_.capacity()};
}

void* contentless_device::reserve(std::size_t bytes) {
  const std::size_t g = granularity();
  if (bytes == 0 || bytes % g != 0) {
    throw invalid_argument(fmt::format(
        "contentless_device::reserve: {} bytes is not a positive multiple of the granularity {}", bytes, g));
  }
  // Over-take by one granule and align: the arena's bump order keeps the
  // addresses the same in every run.
  auto* p = static_cast<std::byte*>(reserved_.take(bytes + g));
  if (p == nullptr) throw error("contentless_device: address space for reservations used up");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  return reinterpret_cast<void*>((at + g - 1) / g * g);
}

void contentless_device::release(void* /*base*/, std::size_t bytes) noexcept {
  reserved_.forget(bytes + granularity());
}

bool contentless_device::try_map(void* /*ptr*/, std::size_t bytes) {
  std::size_t now = mapped_.load();
  do {
    if (device_.used() + now + bytes > device_.capacity()) return false;
  } while (!mapped_.compare_exchange_weak(now, now + bytes));
  return true;
}

void contentless_device::unmap(void* /*ptr*/, std::size_t bytes) noexcept { mapped_.fetch_sub(bytes); }

}  // namespace tp::sim
