#pragma once
// How request sizes become block and segment sizes. The constants follow
// PyTorch's CUDACachingAllocator so that fragmentation figures compare like
// with like (see Note [Size classes]).
//
// Note [Size classes]
// Requests are rounded up to 512 B. Requests of at most 1 MiB come from the
// small pool, whose segments are 2 MiB; larger ones from the large pool,
// whose segments are 20 MiB for requests under 10 MiB and the request rounded
// up to 2 MiB beyond that. A free block is split when the remainder is worth
// keeping: 512 B in the small pool, more than 1 MiB in the large pool, and
// never for blocks of max_split_size or more ("oversize" blocks), which are
// reused only for requests within 20 MiB of their size.

#include <cstddef>

namespace tp {

/// The two pools of the caching allocator; see Note [Size classes].
enum class pool_kind : unsigned char { small, large };

inline constexpr const char* to_string(pool_kind p) { return p == pool_kind::small ? "small" : "large"; }

/// How long the caller expects an allocation to live: Note [Long-lived
/// placement] in caching_allocator.hpp. Each has its own segments and pools.
enum class lifetime : unsigned char { transient, long_lived };

inline constexpr const char* to_string(lifetime l) { return l == lifetime::transient ? "transient" : "long_lived"; }

namespace size_policy {

inline constexpr std::size_t min_block_size = 512;
inline constexpr std::size_t small_size = std::size_t{1} << 20;        // 1 MiB
inline constexpr std::size_t small_buffer = std::size_t{2} << 20;      // 2 MiB
inline constexpr std::size_t large_buffer = std::size_t{20} << 20;     // 20 MiB
inline constexpr std::size_t min_large_alloc = std::size_t{10} << 20;  // 10 MiB
inline constexpr std::size_t round_large = std::size_t{2} << 20;       // 2 MiB

/// Rounds x up to a multiple of m. Requires: m > 0, x + m does not overflow.
constexpr std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

/// Rounds x down to a multiple of m. Requires: m > 0.
constexpr std::size_t round_down(std::size_t x, std::size_t m) { return x / m * m; }

/// Whether g can be a granule size: a power of two.
constexpr bool is_power_of_two(std::size_t g) { return g != 0 && (g & (g - 1)) == 0; }

/// x rounded down / up to a multiple of the granule size g, with masks (no
/// division: these run when a block is carved). Requires: is_power_of_two(g).
constexpr std::size_t align_down(std::size_t x, std::size_t g) { return x & ~(g - 1); }
constexpr std::size_t align_up(std::size_t x, std::size_t g) { return align_down(x + g - 1, g); }

/// Bytes of the whole granules of size g inside [begin, end).
/// Requires: is_power_of_two(g).
constexpr std::size_t whole_granules(std::size_t begin, std::size_t end, std::size_t g) {
  const std::size_t first = align_up(begin, g);
  const std::size_t last = align_down(end, g);
  return last > first ? last - first : 0;
}

/// The block size serving a request of `bytes`. Requires: bytes > 0.
constexpr std::size_t block_size(std::size_t bytes) { return round_up(bytes, min_block_size); }

/// The pool a block of `size` (already rounded) comes from.
constexpr pool_kind pool_for(std::size_t size) {
  return size <= small_size ? pool_kind::small : pool_kind::large;
}

/// The lifetime a request of `size` bytes is placed by: small requests are
/// transient whatever the caller expects (Note [Long-lived placement]).
constexpr lifetime placed_as(std::size_t size, lifetime expected) {
  return pool_for(size) == pool_kind::small ? lifetime::transient : expected;
}

/// The usual segment size for a block of `size`.
constexpr std::size_t segment_size(std::size_t size) {
  if (size <= small_size) return small_buffer;
  if (size < min_large_alloc) return large_buffer;
  return round_up(size, round_large);
}

/// The smallest segment that still serves a block of `size`; used when the
/// usual one would pass the budget or the device's free memory.
constexpr std::size_t min_segment_size(std::size_t size) {
  return size <= small_size ? size : round_up(size, round_large);
}

/// Whether a free block of `block` bytes serving a request of `size` bytes
/// should be split, leaving the remainder in the cache. In an expandable
/// segment every remainder of min_block_size or more is split off, as
/// PyTorch does: a block there is carved to fit, and what is left stays
/// usable (or unmappable, Note [Expandable segments] in caching_allocator.hpp)
/// instead of riding along with the allocation.
constexpr bool should_split(pool_kind pool, std::size_t block, std::size_t size,
                            std::size_t max_split_size, bool expandable = false) {
  const std::size_t remaining = block - size;
  if (pool == pool_kind::small || expandable) return remaining >= min_block_size;
  return size < max_split_size && remaining > small_size;
}

/// Whether a cached free block of `block` bytes may serve a request of `size`
/// bytes (block >= size): oversize blocks are kept for large requests and not
/// handed out for requests far smaller than themselves.
constexpr bool may_serve(std::size_t block, std::size_t size, std::size_t max_split_size) {
  if (size < max_split_size && block >= max_split_size) return false;
  if (size >= max_split_size && block >= size + large_buffer) return false;
  return true;
}

}  // namespace size_policy
}  // namespace tp
