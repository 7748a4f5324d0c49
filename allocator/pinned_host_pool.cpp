#include "allocator/pinned_host_pool.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "core/format_bytes.hpp"

namespace tp {
namespace {

constexpr std::size_t page_bytes = 4096;
constexpr std::size_t large_round_bytes = std::size_t{2} << 20;

std::size_t round_up(std::size_t bytes, std::size_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

std::string format_budget(const std::optional<std::size_t>& budget) {
  return budget ? format_bytes(*budget) : std::string("unlimited");
}

}  // namespace

pinned_host_pool::pinned_host_pool(device& dev, options opts)
    : dev_(dev), fallback_(opts.fallback), budget_(opts.host_budget) {}

pinned_host_pool::~pinned_host_pool() {
  release_cached();
  // Blocks still handed out are a caller bug, but the device must get them back.
  for (const auto& [ptr, block] : live_) {
    if (block.pinned) {
      dev_.deallocate_host(ptr, block.size);
    } else {
      std::free(ptr);  // from std::aligned_alloc
    }
  }
}

std::size_t pinned_host_pool::size_class(std::size_t bytes) noexcept {
  constexpr std::size_t max_small = std::size_t{1} << max_class_log2;
  if (bytes <= max_small) return std::max(std::size_t{1} << min_class_log2, std::bit_ceil(bytes));
  return round_up(bytes, large_round_bytes);
}

host_block pinned_host_pool::allocate(std::size_t bytes) {
  if (bytes > max_request_bytes) {
    const host_pool_stats s = stats();
    throw out_of_memory(fmt::format(
        "pinned host pool: requested {} bytes, more than any host allocation can hold; in use {}, "
        "cached {}",
        bytes, format_bytes(s.in_use_bytes), format_bytes(s.cached_bytes)));
  }
  const std::size_t cls = size_class(bytes);

  std::vector<free_block> to_release;
  bool reserved = false;
  {
    std::lock_guard lock(mu_);
    if (auto hit = take_cached_locked(cls)) return hand_out_locked(*hit, /*from_device=*/false);
    if (!fits_locked(cls)) {  // Note [Pinned host budget]: reclaim, then re-check
      const std::size_t target = *budget_ >= cls ? *budget_ - cls : 0;
      to_release = trim_cache_locked(target);
    }
    if (fits_locked(cls)) {
      pending_bytes_ += cls;
      reserved = true;
    }
  }
  release_to_device(to_release);
  if (!reserved) return fallback_or_throw(bytes, cls, host_fallback_reason::budget);

  void* ptr = nullptr;
  try {
    ptr = dev_.try_allocate_host(cls);
    if (ptr == nullptr) {
      std::vector<free_block> cached;
      {
        std::lock_guard lock(mu_);
        cached = trim_cache_locked(0);
      }
      if (!cached.empty()) {
        release_to_device(cached);
        ptr = dev_.try_allocate_host(cls);
      }
    }
  } catch (...) {
    std::lock_guard lock(mu_);
    pending_bytes_ -= cls;
    throw;
  }
  {
    std::lock_guard lock(mu_);
    pending_bytes_ -= cls;
    if (ptr != nullptr) return hand_out_locked(free_block{ptr, cls}, /*from_device=*/true);
  }
  return fallback_or_throw(bytes, cls, host_fallback_reason::device);
}

void pinned_host_pool::deallocate(void* ptr) noexcept {
  if (ptr == nullptr) return;
  live_block block{};
  {
    std::lock_guard lock(mu_);
    const auto it = live_.find(ptr);
    if (it == live_.end()) {
      fail_fast(fmt::format("pinned_host_pool::deallocate: {} was not allocated by this pool, or was already freed",
                            ptr));
    }
    block = it->second;
    if (block.pinned) {
      // Cache first (a bad_alloc here ends the process: deallocate is noexcept).
      if (block.size <= (std::size_t{1} << max_class_log2)) {
        const auto index = static_cast<std::size_t>(std::countr_zero(block.size)) - min_class_log2;
        small_free_[index].push_back(ptr);
      } else {
        large_free_.emplace(block.size, ptr);
      }
      live_.erase(it);
      stats_.in_use_bytes -= block.size;
      stats_.cached_bytes += block.size;
      return;
    }
    live_.erase(it);
    stats_.pageable_bytes -= block.size;
  }
  std::free(ptr);  // from std::aligned_alloc
}

void pinned_host_pool::release_cached() noexcept {
  std::vector<free_block> blocks;
  {
    std::lock_guard lock(mu_);
    blocks = trim_cache_locked(0);
  }
  release_to_device(blocks);
}

void pinned_host_pool::set_budget(std::optional<std::size_t> host_budget) {
  std::vector<free_block> blocks;
  {
    std::lock_guard lock(mu_);
    const std::size_t in_use = stats_.in_use_bytes + pending_bytes_;
    if (host_budget && *host_budget < in_use) {
      throw invalid_argument(fmt::format(
          "pinned_host_pool::set_budget: host_budget {} is below the {} of pinned memory in use; "
          "free blocks first or choose at least that much",
          format_bytes(*host_budget), format_bytes(in_use)));
    }
    budget_ = host_budget;
    if (budget_) blocks = trim_cache_locked(*budget_);
  }
  release_to_device(blocks);
}

std::optional<std::size_t> pinned_host_pool::budget() const {
  std::lock_guard lock(mu_);
  return budget_;
}

host_fallback pinned_host_pool::fallback() const { return fallback_; }

host_pool_stats pinned_host_pool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::optional<pinned_host_pool::free_block> pinned_host_pool::take_cached_locked(std::size_t cls) {
  if (cls <= (std::size_t{1} << max_class_log2)) {
    auto& list = small_free_[static_cast<std::size_t>(std::countr_zero(cls)) - min_class_log2];
    if (list.empty()) return std::nullopt;
    void* ptr = list.back();
    list.pop_back();
    stats_.cached_bytes -= cls;
    return free_block{ptr, cls};
  }
  // Best fit, at most 25% larger: Note [Pinned host size classes].
  const auto it = large_free_.lower_bound(cls);
  if (it == large_free_.end() || it->first > cls + cls / 4) return std::nullopt;
  const free_block b{it->second, it->first};
  large_free_.erase(it);
  stats_.cached_bytes -= b.size;
  return b;
}

bool pinned_host_pool::fits_locked(std::size_t bytes) const {
  if (!budget_) return true;
  const std::size_t held = stats_.in_use_bytes + stats_.cached_bytes + pending_bytes_;
  return held <= *budget_ && bytes <= *budget_ - held;
}

std::vector<pinned_host_pool::free_block> pinned_host_pool::trim_cache_locked(
    std::optional<std::size_t> limit) {
  // Largest first, so that the fewest (slow) device frees make room.
  std::vector<free_block> out;
  const std::size_t target = limit.value_or(0);
  auto over = [&] {
    return stats_.in_use_bytes + stats_.cached_bytes + pending_bytes_ > target &&
           stats_.cached_bytes > 0;
  };
  while (over() && !large_free_.empty()) {
    const auto it = std::prev(large_free_.end());
    out.push_back({it->second, it->first});
    stats_.cached_bytes -= it->first;
    large_free_.erase(it);
  }
  for (std::size_t i = num_small_classes; i-- > 0 && over();) {
    const std::size_t size = std::size_t{1} << (i + min_class_log2);
    auto& list = small_free_[i];
    while (over() && !list.empty()) {
      out.push_back({list.back(), size});
      list.pop_back();
      stats_.cached_bytes -= size;
    }
  }
  return out;
}

void pinned_host_pool::release_to_device(const std::vector<free_block>& blocks) noexcept {
  for (const auto& b : blocks) dev_.deallocate_host(b.ptr, b.size);
}

host_block pinned_host_pool::hand_out_locked(free_block b, bool from_device) {
  live_.emplace(b.ptr, live_block{b.size, true});
  stats_.in_use_bytes += b.size;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  if (from_device) {
    ++stats_.num_device_allocs;
  } else {
    ++stats_.num_cache_hits;
  }
  return host_block{b.ptr, b.size, true, host_fallback_reason::none};
}

host_block pinned_host_pool::fallback_or_throw(std::size_t bytes, std::size_t cls,
                                               host_fallback_reason why) {
  if (fallback_ == host_fallback::pageable) {
    const std::size_t size = round_up(std::max<std::size_t>(bytes, 1), page_bytes);
    void* ptr = std::aligned_alloc(page_bytes, size);
    if (ptr != nullptr) {
      std::lock_guard lock(mu_);
      live_.emplace(ptr, live_block{size, false});
      stats_.pageable_bytes += size;
      ++stats_.num_fallbacks;
      return host_block{ptr, size, false, why};
    }
  }
  std::string figures;
  {
    std::lock_guard lock(mu_);
    figures = fmt::format("requested {} (size class {}), host_budget {}, in use {}, cached {}",
                          format_bytes(bytes), format_bytes(cls), format_budget(budget_),
                          format_bytes(stats_.in_use_bytes + pending_bytes_),
                          format_bytes(stats_.cached_bytes));
  }
  if (fallback_ == host_fallback::pageable) {
    throw out_of_memory(fmt::format(
        "pinned host pool full and pageable fallback failed: {}; the host is out of memory",
        figures));
  }
  if (why == host_fallback_reason::device) {
    throw out_of_memory(fmt::format(
        "pinned host pool full: {}; the device could not page-lock {} more (host RAM or the "
        "locked-memory limit, ulimit -l); free host memory or set host_fallback:pageable",
        figures, format_bytes(cls)));
  }
  throw out_of_memory(fmt::format(
      "pinned host pool full: {}; raise host_budget or set host_fallback:pageable", figures));
}

}  // namespace tp
