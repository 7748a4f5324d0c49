#pragma once
// The mixed-size steady-state workload of tp_allocator_bench: a window of
// live blocks in which, each step, a random block is freed and a new one of a
// log-uniform random size takes its place. The sequence is generated once,
// from a fixed seed, so the cached and the upstream runs replay exactly the
// same calls, and every run of the binary replays the same sequence.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tp::bench {

/// splitmix64: a tiny deterministic generator. Unlike the <random>
/// distributions, its output is the same with every standard library.
class splitmix64 {
 public:
  explicit splitmix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [0, n). Requires: n > 0. (The modulo bias is irrelevant here.)
  std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>(next() % n); }

 private:
  std::uint64_t state_;
};

/// What to generate. Defaults are the benchmark's: 64 live blocks of
/// 512 B .. 8 MiB, log-uniform.
struct mixed_shape {
  std::uint32_t window = 64;
  std::size_t steps = 4096;
  std::size_t min_bytes = 512;
  std::size_t max_bytes = std::size_t{8} << 20;
  std::uint64_t seed = 0x7e25'0a9e'2026'1121ULL;
};

/// One generated sequence. Replay: allocate initial[i] into slot i; then for
/// each step s, free slot victims[s] and allocate sizes[s] into it.
struct mixed_workload {
  std::vector<std::size_t> initial;    // window sizes
  std::vector<std::size_t> sizes;      // per step
  std::vector<std::uint32_t> victims;  // per step, slot in [0, window)
};

/// Log-uniform sizes in [min_bytes, max_bytes]. Pure; the same shape always
/// gives the same workload.
inline mixed_workload make_mixed_workload(const mixed_shape& shape = {}) {
  splitmix64 rng(shape.seed);
  const double lo = std::log(static_cast<double>(shape.min_bytes));
  const double hi = std::log(static_cast<double>(shape.max_bytes));
  auto size = [&] {
    const auto b = static_cast<std::size_t>(std::exp(lo + rng.unit() * (hi - lo)));
    return b < shape.min_bytes ? shape.min_bytes : b > shape.max_bytes ? shape.max_bytes : b;
  };
  mixed_workload w;
  for (std::uint32_t i = 0; i < shape.window; ++i) w.initial.push_back(size());
  for (std::size_t s = 0; s < shape.steps; ++s) {
    w.sizes.push_back(size());
    w.victims.push_back(rng.below(shape.window));
  }
  return w;
}

/// A workload replayed through a Source (allocate(bytes) -> void*,
/// deallocate(ptr, bytes)): the window is allocated on construction; each
/// step frees one block and allocates the next, wrapping around the
/// sequence. Requires: drain() before the Source goes away.
template <class Source>
class mixed_window {
 public:
  mixed_window(const mixed_workload& w, Source& src) : w_(w), src_(src), bytes_(w.initial) {
    for (std::size_t b : bytes_) ptrs_.push_back(src_.allocate(b));
  }
  void steps(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t v = w_.victims[cursor_];
      src_.deallocate(ptrs_[v], bytes_[v]);
      bytes_[v] = w_.sizes[cursor_];
      ptrs_[v] = src_.allocate(bytes_[v]);
      if (++cursor_ == w_.sizes.size()) cursor_ = 0;
    }
  }
  void drain() {
    for (std::size_t i = 0; i < ptrs_.size(); ++i) src_.deallocate(ptrs_[i], bytes_[i]);
    ptrs_.clear();
  }

 private:
  const mixed_workload& w_;
  Source& src_;
  std::vector<std::size_t> bytes_;
  std::vector<void*> ptrs_;
  std::size_t cursor_ = 0;
};

}  // namespace tp::bench
