#include "runtime/reclaim_account.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "core/format_bytes.hpp"

namespace tp {

std::size_t reclaim_account::begin(std::size_t asked, std::int64_t alloc_retries) {
  round_ = alloc_retries == retries_ ? round_ + 1 : 0;
  retries_ = alloc_retries;
  asked_ = asked;
  held_ = 0;
  kept_ = 0;
  if (round_ == 0) return asked;
  const int shift = static_cast<int>(std::min<std::uint64_t>(round_, 40));
  return asked > (SIZE_MAX >> shift) ? SIZE_MAX : asked << shift;
}

void published_reclaim::store(const reclaim_outcome& o) noexcept {
  asked_.store(o.asked, std::memory_order_relaxed);
  freed_.store(o.freed, std::memory_order_relaxed);
  held_.store(o.held, std::memory_order_relaxed);
  kept_.store(o.kept, std::memory_order_relaxed);
}

reclaim_outcome published_reclaim::load() const noexcept {
  return {asked_.load(std::memory_order_relaxed), freed_.load(std::memory_order_relaxed),
          held_.load(std::memory_order_relaxed), kept_.load(std::memory_order_relaxed)};
}

std::string describe_shortfall(const reclaim_outcome& o) {
  if (o.asked == 0 || o.freed >= o.asked) return {};
  std::string s =
      fmt::format("; its last reclaim was asked for {} and freed {}", format_bytes(o.asked), format_bytes(o.freed));
  if (o.held > 0) s += fmt::format(", leaving {} held elsewhere", format_bytes(o.held));
  if (o.kept > 0) {
    s += fmt::format(", keeping {} that could neither be swapped (the pinned host pool is full, key "
                     "'host_budget') nor recomputed",
                     format_bytes(o.kept));
  }
  if (o.held == 0 && o.kept == 0) s += ": nothing else was evictable";
  return s;
}

}  // namespace tp
