#pragma once
// What a copy between the device and the pinned host pool costs, as the
// policies and the step planner price a swap: seeded from the configured
// figures, then learned from the copies the transfer engine times on this
// device (copy_timer.hpp).
//
// Note [Copy cost model]
// A copy of b bytes is modelled as latency + b / bandwidth (bandwidth_model),
// the form a DMA engine over PCIe or NVLink follows: a fixed cost per copy
// (the driver, the engine's start, the link's round trip) and a rate. The
// configured figures (memory_runtime_options::bandwidth; tp-sim's
// --bandwidth and --latency-us) are a guess, and a GPU rarely grants them:
// small copies are latency-bound, a pageable fallback or a link shared with
// data loading and NCCL is slower, and the two directions differ. So the
// model keeps, per direction (to the host: offloads; to the device:
// prefetches) and per size class, a factor on the seed's time, learned from
// timed copies:
//   transfer_ns(d, b) = seed.transfer_ns(b) x factor[d][class(b)].
// Size classes, because latency and bandwidth weigh differently by size: a
// copy under 256 KiB is mostly latency (10 us at 25 GB/s moves 250 KB),
// one over 64 MiB is all bandwidth, and a single factor fitted to a mix
// would misprice both ends when the seed's latency is wrong. Four classes
// 16x apart (< 256 KiB, < 4 MiB, < 64 MiB, larger); within a class the
// seed's shape stands, scaled. A class nothing has measured keeps the seed.
// Each timed copy moves its cell's factor towards measured / seeded, in log
// space (a geometric mean, so that one copy 100x slow, a cold first copy or
// one that queued behind a busy link, moves it by at most 100^(1/8)): the
// mean of the first eight samples, then an exponential average with weight
// 1/8, so the model follows a link whose speed drifts (TCP's RTT estimator
// has the same shape). The transfer engine owns the model and times its
// copies on the device (Note [Timing copies] in copy_timer.hpp); the runtime
// hands a copy of the model to the policy at each reclaim and to the
// planner at each step boundary, and hybrid plans again when a class moved
// (Note [Replanning] in hybrid_policy.hpp). tp-sim's device copies at its
// --bandwidth and --latency-us, which also seed the model: what it times is
// what it was told. The recompute side needs no such model: a tensor's
// recompute cost is already measured, the segment's forward time in the
// live runtime (set_recompute_cost) and the operator's recorded time in
// tp-sim.

#include <array>
#include <cstddef>
#include <cstdint>

namespace tp {

/// The configured copy figures: the model's seed (Note [Copy cost model]).
struct bandwidth_model {
  double bytes_per_s = 12e9;         ///< host<->device copy bandwidth
  std::int64_t latency_ns = 10'000;  ///< fixed cost per copy
  /// One copy of bytes, in ns.
  std::int64_t transfer_ns(std::size_t bytes) const {
    if (bytes_per_s <= 0) return latency_ns;
    return latency_ns + static_cast<std::int64_t>(static_cast<double>(bytes) * 1e9 / bytes_per_s);
  }
};

enum class copy_direction : unsigned char { to_host, to_device };

/// Note [Copy cost model]. A value: the runtime hands copies of it to the
/// policies and the planner. Thread-safety: none.
class copy_cost_model {
 public:
  static constexpr std::size_t size_classes = 4;

  copy_cost_model() = default;
  explicit copy_cost_model(bandwidth_model seed) : seed_(seed) {}

  /// The class of a copy of bytes: 0 (< 256 KiB) to 3 (>= 64 MiB).
  static std::size_t size_class(std::size_t bytes);

  /// One copy of bytes in direction d, in ns.
  std::int64_t transfer_ns(copy_direction d, std::size_t bytes) const;
  /// Out and back.
  std::int64_t round_trip_ns(std::size_t bytes) const {
    return transfer_ns(copy_direction::to_host, bytes) + transfer_ns(copy_direction::to_device, bytes);
  }

  /// A copy of bytes in direction d took elapsed_ns on the device. A copy of
  /// 0 bytes or a negative time teaches nothing and is ignored.
  void observe(copy_direction d, std::size_t bytes, std::int64_t elapsed_ns);

  /// Timed copies seen in d's class of bytes (0: that class is the seed's).
  std::uint64_t samples(copy_direction d, std::size_t bytes) const { return cell_of(d, bytes).samples; }
  /// The measured time over the seeded one in d's class of bytes (1: none).
  double factor(copy_direction d, std::size_t bytes) const;
  const bandwidth_model& seed() const { return seed_; }

  /// True when some class's factor differs from `other`'s by more than
  /// `ratio` (> 1) either way, or the seeds differ: a plan made with one no
  /// longer prices copies as the other would (Note [Replanning] in
  /// hybrid_policy.hpp).
  bool differs_from(const copy_cost_model& other, double ratio) const;

 private:
  struct cell {
    double log_factor = 0;  // log(measured / seeded)
    std::uint64_t samples = 0;
  };
  const cell& cell_of(copy_direction d, std::size_t bytes) const {
    return cells_[static_cast<std::size_t>(d)][size_class(bytes)];
  }

  bandwidth_model seed_{};
  std::array<std::array<cell, size_classes>, 2> cells_{};
};

}  // namespace tp
