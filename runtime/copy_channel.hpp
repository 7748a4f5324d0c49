#pragma once
// detail::copy_channel: one direction of the copy bandwidth in the step
// planner's fluid model (Note [Step plan] in step_planner.hpp): time cut
// into buckets, each with room for a share of its length (Note [Planning
// margins] in step_planner.cpp), filled by planned copies.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace tp::detail {

/// Thread-safety: none; a value the planner owns for one plan.
class copy_channel {
 public:
  /// Requires: bucket_ns > 0, derate in (0, 1].
  copy_channel(std::int64_t bucket_ns, double derate)
      : w_(bucket_ns), cap_(static_cast<std::int64_t>(static_cast<double>(bucket_ns) * derate)) {}

  /// Fills `need` ns of channel time from `ready` on; returns when it ends.
  /// Takes the time only when `commit`. Requires: need >= 0.
  std::int64_t forward(std::int64_t ready, std::int64_t need, bool commit) {
    std::int64_t b = std::max<std::int64_t>(ready, 0) / w_;
    std::int64_t at = std::max<std::int64_t>(ready, 0);
    for (;; ++b) {
      const std::int64_t room = std::min(free(b), (b + 1) * w_ - at);
      const std::int64_t take = std::min(room, need);
      if (commit) use(b, take);
      need -= take;
      if (need == 0) return at + take;
      at = (b + 1) * w_;
    }
  }
  /// Fills `need` ns of channel time ending by `deadline`; returns when it
  /// starts, or nothing when the channel has no room before the deadline.
  /// Takes the time only when `commit` and it fits.
  std::optional<std::int64_t> backward(std::int64_t deadline, std::int64_t need, bool commit) {
    if (deadline <= 0) return std::nullopt;
    std::int64_t at = deadline;
    std::int64_t left = need;
    for (std::int64_t b = (deadline - 1) / w_; b >= 0; --b) {
      const std::int64_t take = std::min({free(b), at - b * w_, left});
      left -= take;
      if (left == 0) {
        const std::int64_t start = at - take;
        if (commit) fill_back(deadline, need);
        return start;
      }
      at = b * w_;
    }
    return std::nullopt;
  }

 private:
  void fill_back(std::int64_t deadline, std::int64_t need) {
    std::int64_t at = deadline;
    for (std::int64_t b = (deadline - 1) / w_; b >= 0 && need > 0; --b) {
      const std::int64_t take = std::min({free(b), at - b * w_, need});
      use(b, take);
      need -= take;
      at = b * w_;
    }
  }
  std::int64_t free(std::int64_t b) const {
    return static_cast<std::size_t>(b) < used_.size() ? cap_ - used_[static_cast<std::size_t>(b)] : cap_;
  }
  void use(std::int64_t b, std::int64_t ns) {
    if (static_cast<std::size_t>(b) >= used_.size()) used_.resize(static_cast<std::size_t>(b) + 1, 0);
    used_[static_cast<std::size_t>(b)] += ns;
  }
  std::int64_t w_;
  std::int64_t cap_;  // usable ns per bucket
  std::vector<std::int64_t> used_;
};

}  // namespace tp::detail
