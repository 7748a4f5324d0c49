// simulated_device: construction, plain and host memory, and virtual
// memory. Streams, events and copies (Note [Simulated stream model]) are in
// simulated_device_streams.cpp.

#include "device/simulated_device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "device/simulated_device_check.hpp"

namespace tp {
namespace {

using detail::as_bytes;
using detail::hex;

constexpr std::size_t host_alignment = 512;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// The region of map that contains p, or end().
template <class Map>
auto find_region(Map& map, const void* p) {
  auto it = map.upper_bound(as_bytes(p));
  if (it == map.begin()) return map.end();
  --it;
  return as_bytes(p) < it->first + it->second.bytes ? it : map.end();
}

}  // namespace

simulated_device::simulated_device(clock& clk) : simulated_device(options{}, clk) {}

simulated_device::simulated_device(options opts, clock& clk) : opts_(opts), clock_(clk) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t g = opts_.granularity;
  if (g == 0 || (g & (g - 1)) != 0 || g % page != 0)
    throw invalid_argument(
        fmt::format("simulated_device: granularity {} must be a power of two and a multiple of the "
                    "page size {}",
                    g, page));
  if (!(opts_.bandwidth_bytes_per_s >= 0.0) || std::isinf(opts_.bandwidth_bytes_per_s))
    throw invalid_argument(fmt::format(
        "simulated_device: bandwidth_bytes_per_s {} must be finite and >= 0 (0: instant)",
        opts_.bandwidth_bytes_per_s));
  if (opts_.latency_ns < 0)
    throw invalid_argument(
        fmt::format("simulated_device: latency_ns {} must be >= 0", opts_.latency_ns));
  streams_.emplace(to_underlying(default_stream), stream_state{});
}

simulated_device::~simulated_device() {
  for (auto& [p, r] : device_allocs_) std::free(const_cast<std::byte*>(p));
  for (auto& [p, r] : host_allocs_) std::free(const_cast<std::byte*>(p));
  for (auto& [p, r] : reservations_) munmap(const_cast<std::byte*>(p), r.bytes);
}

std::string simulated_device::name() const { return "simulated"; }

// --- plain and host memory ---------------------------------------------------

void* simulated_device::allocate_in(region_map& map, std::size_t& used, std::size_t capacity,
                                    std::size_t bytes, const char* what) {
  if (bytes == 0)
    throw invalid_argument(fmt::format("simulated_device::{}: bytes must be > 0", what));
  std::lock_guard lock(mu_);
  if (bytes > capacity - used) return nullptr;
  void* p = std::aligned_alloc(host_alignment, round_up(bytes, host_alignment));
  if (p == nullptr) return nullptr;
  map.emplace(as_bytes(p), region{bytes, {}});
  used += bytes;
  return p;
}

void simulated_device::free_in(region_map& map, std::size_t& used, void* ptr, std::size_t bytes,
                               const char* what) noexcept {
  if (ptr == nullptr) return;
  std::unique_lock lock(mu_);
  wait_unused(lock, ptr, bytes);
  auto it = map.find(as_bytes(ptr));
  TP_CHECK(it != map.end(), "{}({}, {}): not allocated by this device", what, hex(ptr), bytes);
  TP_CHECK(it->second.bytes == bytes, "{}({}, {}): allocated with {} bytes", what, hex(ptr), bytes,
           it->second.bytes);
  map.erase(it);
  used -= bytes;
  std::free(ptr);
}

void* simulated_device::try_allocate(std::size_t bytes) {
  return allocate_in(device_allocs_, used_bytes_, opts_.capacity_bytes, bytes, "try_allocate");
}

void simulated_device::deallocate(void* ptr, std::size_t bytes) noexcept {
  free_in(device_allocs_, used_bytes_, ptr, bytes, "deallocate");
}

void* simulated_device::try_allocate_host(std::size_t bytes) {
  return allocate_in(host_allocs_, host_used_bytes_, opts_.host_capacity_bytes, bytes,
                     "try_allocate_host");
}

void simulated_device::deallocate_host(void* ptr, std::size_t bytes) noexcept {
  free_in(host_allocs_, host_used_bytes_, ptr, bytes, "deallocate_host");
}

memory_info simulated_device::memory() const {
  std::lock_guard lock(mu_);
  return {opts_.capacity_bytes - used_bytes_, opts_.capacity_bytes};
}

// --- virtual memory ----------------------------------------------------------

std::size_t simulated_device::granularity() const { return opts_.granularity; }

void* simulated_device::reserve(std::size_t bytes) {
  const std::size_t g = opts_.granularity;
  if (bytes == 0 || bytes % g != 0)
    throw invalid_argument(fmt::format(
        "simulated_device::reserve: {} bytes is not a positive multiple of the granularity {}",
        bytes, g));
  // Over-reserve by one granule, then trim both ends to a granule boundary.
  void* raw =
      mmap(nullptr, bytes + g, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED)
    throw error(fmt::format("simulated_device::reserve: mmap of {} bytes failed: {}", bytes + g,
                            std::strerror(errno)));
  auto* start = static_cast<std::byte*>(raw);
  auto* base = reinterpret_cast<std::byte*>(round_up(address(raw), g));
  const auto head = static_cast<std::size_t>(base - start);
  if (head != 0) munmap(start, head);
  if (g - head != 0) munmap(base + bytes, g - head);
  std::lock_guard lock(mu_);
  reservations_.emplace(base, region{bytes, std::vector<bool>(bytes / g, false)});
  return base;
}

void simulated_device::release(void* base, std::size_t bytes) noexcept {
  std::lock_guard lock(mu_);
  auto it = reservations_.find(as_bytes(base));
  TP_CHECK(it != reservations_.end() && it->second.bytes == bytes,
           "release({}, {}): not a reservation of this device", hex(base), bytes);
  TP_CHECK(
      std::none_of(it->second.mapped.begin(), it->second.mapped.end(), [](bool m) { return m; }),
      "release({}, {}): granules are still mapped", hex(base), bytes);
  reservations_.erase(it);
  munmap(base, bytes);
}

std::optional<simulated_device::granule_span> simulated_device::granules_of(const void* p,
                                                                            std::size_t bytes) {
  auto it = find_region(reservations_, p);
  if (it == reservations_.end()) return std::nullopt;
  const auto offset = static_cast<std::size_t>(as_bytes(p) - it->first);
  if (bytes > it->second.bytes - offset) return std::nullopt;
  const std::size_t g = opts_.granularity;
  const auto flag = [&](std::size_t i) {
    return it->second.mapped.begin() + static_cast<std::ptrdiff_t>(i);
  };
  return granule_span{flag(offset / g),
                      flag(bytes == 0 ? offset / g : (offset + bytes + g - 1) / g)};
}

bool simulated_device::try_map(void* ptr, std::size_t bytes) {
  const std::size_t g = opts_.granularity;
  std::lock_guard lock(mu_);
  const std::optional<granule_span> span = granules_of(ptr, bytes);
  if (!span || bytes == 0 || bytes % g != 0 || address(ptr) % g != 0)
    throw invalid_argument(
        fmt::format("simulated_device::try_map({}, {}): the range must be a positive multiple of "
                    "the granularity {}, aligned to it, inside one reservation",
                    hex(ptr), bytes, g));
  if (std::any_of(span->first, span->second, [](bool m) { return m; }))
    throw invalid_argument(fmt::format(
        "simulated_device::try_map({}, {}): part of the range is already mapped", hex(ptr), bytes));
  if (bytes > opts_.capacity_bytes - used_bytes_) return false;
  if (mprotect(ptr, bytes, PROT_READ | PROT_WRITE) != 0)
    throw error(
        fmt::format("simulated_device::try_map: mprotect failed: {}", std::strerror(errno)));
  std::fill(span->first, span->second, true);
  used_bytes_ += bytes;
  return true;
}

void simulated_device::unmap(void* ptr, std::size_t bytes) noexcept {
  const std::size_t g = opts_.granularity;
  std::unique_lock lock(mu_);
  retire_ready();
  if (copy_using(ptr, bytes)) {
    fail_fast(fmt::format("simulated_device: unmap({}, {}) while a queued copy still uses the range; "
                          "cuda_device's unmap does not wait for it, so on a GPU this is a fault (Note "
                          "[Free waits for the device] in device/cuda/cuda_device.cpp)", hex(ptr), bytes));
  }
  const std::optional<granule_span> span = granules_of(ptr, bytes);
  TP_CHECK(span && bytes != 0 && bytes % g == 0 && address(ptr) % g == 0,
           "unmap({}, {}): not a granule-aligned range inside one reservation", hex(ptr), bytes);
  TP_CHECK(std::all_of(span->first, span->second, [](bool m) { return m; }),
           "unmap({}, {}): part of the range is not mapped", hex(ptr), bytes);
  madvise(ptr, bytes, MADV_DONTNEED);
  mprotect(ptr, bytes, PROT_NONE);
  std::fill(span->first, span->second, false);
  used_bytes_ -= bytes;
}

bool simulated_device::copyable_range(const void* p, std::size_t bytes) {
  for (const region_map* map : {&device_allocs_, &host_allocs_}) {
    auto it = find_region(*map, p);
    if (it != map->end())
      return bytes <= it->second.bytes - static_cast<std::size_t>(as_bytes(p) - it->first);
  }
  if (find_region(reservations_, p) == reservations_.end()) return true;  // pageable host memory
  const std::optional<granule_span> span = granules_of(p, bytes);
  return span && std::all_of(span->first, span->second, [](bool m) { return m; });
}

}  // namespace tp
