#pragma once
// Compressed activations for backward: the pack and restore kernels of the
// saved-tensor action "compress" (DESIGN.md, "Tracking"). Which saved tensors
// are compressed is decided above this file (Note [Which saved tensors are
// compressed] in python/tensorpager/techniques/compress_pack.py); this file only turns one
// tensor into a smaller one and back, and counts what it did.
//
// Note [Compression methods]
//   pool2  2x2 average pooling of a 4-D (N, C, H, W) tensor, restored by
//          nearest upsampling (each pooled value fills its 2x2 window; odd H
//          or W pool the last row or column alone). For convolution inputs:
//          the forward stays exact, the weight gradient is computed from the
//          smoothed input (Barley and Froening, 2024). 1/4 of the bytes for
//          even H and W, ceil(H/2)*ceil(W/2)/(H*W) otherwise.
//   bf16   a cast to bfloat16 (same exponent range as float32, 8 significant
//          bits: relative error <= 2^-8 per element). 1/2 of float32's bytes.
//   fp8    float8 e4m3 with one float32 scale per tensor, amax/448, so the
//          largest magnitude maps to e4m3's largest finite value (4
//          significant bits: relative error <= 2^-4 per element above
//          amax*2^-15; smaller values lose precision and flush to zero).
//          1/4 of float32's bytes, plus 4 bytes. Packing converts in chunks
//          of packing_chunk_elements, so its temporary stays bounded. A
//          tensor holding Inf or NaN restores as NaN (e4m3fn has no Inf).
// Every method keeps the tensor's device; restore() gives back the original
// shape, dtype and memory format. Packing and restoring record no autograd
// history.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>

#include "hooks/saved_version.hpp"

namespace tp::hooks::compress {

/// A compression method (Note [Compression methods]); none leaves a tensor
/// as it is.
enum class method : std::uint8_t { none, pool2, bf16, fp8 };

/// "none", "pool2", "bf16", "fp8".
std::string_view to_string(method m) noexcept;

/// Parses a method name (case-insensitive). Throws tp::invalid_argument
/// naming the text and listing the accepted names.
method parse_method(std::string_view text);

/// Elements converted per chunk when packing fp8.
inline constexpr std::int64_t packing_chunk_elements = std::int64_t{1} << 20;

/// Why `t` cannot be packed by m into fewer bytes (not floating point, not
/// dense, already as small, not 4-D for pool2, ...), or nullopt when it can.
/// Pure.
std::optional<std::string> why_not_packable(const at::Tensor& t, method m);

/// One saved tensor in compressed form. Immutable once made; restore() may
/// be called from any thread, any number of times. Counted in stats() from
/// construction to destruction.
class packed_activation {
 public:
  ~packed_activation();
  packed_activation(const packed_activation&) = delete;
  packed_activation& operator=(const packed_activation&) = delete;

  method kind() const noexcept { return kind_; }
  /// Bytes of the tensor as it was given to pack().
  std::size_t original_bytes() const noexcept { return original_bytes_; }
  /// Bytes held now: the payload, plus the scale for fp8.
  std::size_t packed_bytes() const noexcept;
  /// The compressed data itself (for tests and tools); do not modify it.
  const at::Tensor& payload() const noexcept { return payload_; }
  /// A new tensor of the original shape, dtype, device and memory format,
  /// holding the decompressed values (Note [Compression methods]). Raises
  /// autograd's error when the original was changed in place since it was
  /// packed (Note [In-place changes to saved tensors] in hooks/saved_version.hpp).
  at::Tensor restore() const;

 private:
  friend std::shared_ptr<packed_activation> pack(const at::Tensor& t, method m);
  packed_activation(method kind, at::Tensor payload, at::Tensor scale, const at::Tensor& original);

  method kind_;
  at::Tensor payload_;
  at::Tensor scale_;  // fp8 only: a 0-dim float32 tensor on the payload's device
  std::vector<std::int64_t> sizes_;
  at::ScalarType dtype_;
  at::MemoryFormat memory_format_;
  std::size_t original_bytes_;
  saved_version version_;  // the original's
};

/// Compresses t by m. Throws tp::invalid_argument when why_not_packable()
/// gives a reason, or for method::none. t is only read. Thread-safe.
/// Stream: torch's current stream of t's device.
std::shared_ptr<packed_activation> pack(const at::Tensor& t, method m);

/// Counters since the last reset_stats(), under "tensorpager.compress.*"
/// keys: per method "<m>.tensors", "<m>.bytes_in", "<m>.bytes_out",
/// "<m>.restored"; and "live_bytes" / "live_bytes_peak" (packed bytes
/// currently held), "bytes_saved" (sum of bytes_in - bytes_out). Thread-safe.
std::map<std::string, std::int64_t> stats();

/// Zeroes every counter except live_bytes, which counts objects still alive;
/// its peak restarts from it. Thread-safe.
void reset_stats();

}  // namespace tp::hooks::compress
