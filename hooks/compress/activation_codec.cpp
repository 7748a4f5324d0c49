// Pack and restore kernels for compressed activations: Note [Compression
// methods] in activation_codec.hpp.

#include "hooks/compress/activation_codec.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <string>
#include <utility>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/StringUtil.h>

#include "core/errors.hpp"
#include "hooks/process_state.hpp"
#include "hooks/profiler_glue.hpp"

namespace tp::hooks::compress {
namespace {

constexpr std::array<method, 4> all_methods{method::none, method::pool2, method::bf16, method::fp8};

/// e4m3fn's largest finite value: a tensor's largest magnitude maps onto it.
constexpr double fp8_e4m3_max = 448.0;

using method_counters = codec_counters::per_method;
static_assert(codec_counters::methods == all_methods.size());

/// Packed tensors may die after static destruction: Note [Process state].
codec_counters& the_counters() { return process().codec; }

method_counters& counters_of(method m) { return the_counters().by_method[static_cast<std::size_t>(m)]; }

std::int64_t signed_bytes(std::size_t bytes) { return static_cast<std::int64_t>(bytes); }

std::size_t bytes_of(const at::Tensor& t) {
  return t.defined() ? static_cast<std::size_t>(t.numel()) * static_cast<std::size_t>(t.element_size()) : 0;
}

void raise_peak(std::int64_t live) {
  auto& peak = the_counters().live_bytes_peak;
  std::int64_t seen = peak.load();
  while (live > seen && !peak.compare_exchange_weak(seen, live)) {
  }
}

bool is_supported_float(at::ScalarType t) {
  return t == at::kDouble || t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

at::Tensor pack_fp8(const at::Tensor& t, at::Tensor& scale) {
  // One pass for the range (aminmax makes no temporary), then a chunked
  // conversion, so packing holds at most one chunk besides t and the result.
  const at::Tensor src = t.is_non_overlapping_and_dense() ? t : t.contiguous();
  const auto [low, high] = at::aminmax(src);
  const at::Tensor amax = at::maximum(low.neg(), high).to(at::kFloat);
  scale = (amax / fp8_e4m3_max).clamp_min(1e-30);  // an all-zero tensor keeps a finite scale
  const at::Tensor inverse = scale.reciprocal();
  at::Tensor out = at::empty_strided(src.sizes(), src.strides(), src.options().dtype(at::kFloat8_e4m3fn));
  // Equal strides and dense storage: element k of the memory span is the
  // same element in both, whatever the memory format.
  const std::int64_t n = src.numel();
  const at::Tensor src_flat = src.as_strided({n}, {1}, src.storage_offset());
  const at::Tensor out_flat = out.as_strided({n}, {1}, out.storage_offset());
  for (std::int64_t begin = 0; begin < n; begin += packing_chunk_elements) {
    const std::int64_t len = std::min(packing_chunk_elements, n - begin);
    // Out of place: t is the saved activation itself. A 0-dim scale keeps
    // the chunk's dtype, so the temporary is one chunk of t's element type.
    out_flat.narrow(0, begin, len).copy_(src_flat.narrow(0, begin, len).mul(inverse));
  }
  return out;
}

}  // namespace

std::string_view to_string(method m) noexcept {
  switch (m) {
    case method::none: return "none";
    case method::pool2: return "pool2";
    case method::bf16: return "bf16";
    case method::fp8: return "fp8";
  }
  return "none";
}

method parse_method(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (method m : all_methods) {
    if (lower == to_string(m)) return m;
  }
  throw tp::invalid_argument("compress: unknown method '" + std::string(text) +
                             "'; accepted: pool2, bf16, fp8, none");
}

std::optional<std::string> why_not_packable(const at::Tensor& t, method m) {
  if (m == method::none) return "method none compresses nothing";
  if (!t.defined()) return "undefined tensor";
  if (t.layout() != at::kStrided) return "not a dense (strided) tensor";
  if (!is_supported_float(t.scalar_type())) {
    return c10::str("dtype ", t.scalar_type(), " is not one of float64, float32, float16, bfloat16");
  }
  if (t.numel() == 0) return "empty tensor";
  switch (m) {
    case method::bf16:
      if (t.element_size() <= 2) return c10::str("dtype ", t.scalar_type(), " is already 16 bits wide");
      break;
    case method::fp8: break;  // every supported dtype is wider than 8 bits
    case method::pool2:
      if (t.dim() != 4) return c10::str("pool2 needs a 4-D (N, C, H, W) tensor, not shape ", t.sizes());
      if (t.size(2) < 2 && t.size(3) < 2) return "pool2 cannot shrink a 1x1 spatial size";
      break;
    case method::none: break;
  }
  return std::nullopt;
}

packed_activation::packed_activation(method kind, at::Tensor payload, at::Tensor scale, const at::Tensor& original)
    : kind_(kind),
      payload_(std::move(payload)),
      scale_(std::move(scale)),
      sizes_(original.sizes().vec()),
      dtype_(original.scalar_type()),
      memory_format_(original.suggest_memory_format()),
      original_bytes_(bytes_of(original)),
      version_(original) {
  method_counters& c = counters_of(kind_);
  c.tensors.fetch_add(1);
  c.bytes_in.fetch_add(signed_bytes(original_bytes_));
  c.bytes_out.fetch_add(signed_bytes(packed_bytes()));
  raise_peak(the_counters().live_bytes.fetch_add(signed_bytes(packed_bytes())) + signed_bytes(packed_bytes()));
}

packed_activation::~packed_activation() { the_counters().live_bytes.fetch_sub(signed_bytes(packed_bytes())); }

std::size_t packed_activation::packed_bytes() const noexcept { return bytes_of(payload_) + bytes_of(scale_); }

at::Tensor packed_activation::restore() const {
  version_.check(dtype_, sizes_);
  const at::NoGradGuard no_grad;
  counters_of(kind_).restored.fetch_add(1);
  switch (kind_) {
    case method::bf16: return payload_.to(dtype_);
    case method::fp8: return payload_.to(dtype_).mul_(scale_);
    case method::pool2: {
      const std::int64_t h = sizes_[2];
      const std::int64_t w = sizes_[3];
      at::Tensor up = at::upsample_nearest2d(payload_, {2 * payload_.size(2), 2 * payload_.size(3)});
      if (up.size(2) != h || up.size(3) != w) up = up.narrow(2, 0, h).narrow(3, 0, w);
      return up.contiguous(memory_format_);
    }
    case method::none: break;
  }
  throw tp::error("compress: restore() of a tensor packed with no method");
}

std::shared_ptr<packed_activation> pack(const at::Tensor& t, method m) {
  if (auto reason = why_not_packable(t, m)) {
    throw tp::invalid_argument(c10::str("compress: cannot pack with ", to_string(m), ": ", *reason));
  }
  const at::NoGradGuard no_grad;
  const at::Tensor x = t.detach();
  at::Tensor payload;
  at::Tensor scale;
  switch (m) {
    case method::pool2:
      payload = at::avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}, /*ceil_mode=*/true, /*count_include_pad=*/false);
      break;
    case method::bf16: payload = x.to(at::kBFloat16); break;
    case method::fp8: payload = pack_fp8(x, scale); break;
    case method::none: break;
  }
  // Note [Compressed in the timeline]
  // The payload was allocated as whatever the recording's context said (an
  // activation, in a forward); a tag re-labels its block for its whole life,
  // so the timeline's plot and report show compressed activations as their
  // own category. The tag names the storage's start, which is the block's
  // address when tensorpager's allocator made it (a block of another
  // allocator matches no recorded block and the timeline analysis ignores
  // the tag).
  // fp8's 4-byte scale is left as it is.
  hooks::tag_block(reinterpret_cast<std::uint64_t>(payload.storage().data()), profiler::category::compressed,
                   m == method::pool2 ? "compressed (pool2)" : m == method::bf16 ? "compressed (bf16)" : "compressed (fp8)");
  // The constructor is private: make_shared cannot reach it.
  return std::shared_ptr<packed_activation>(new packed_activation(m, std::move(payload), std::move(scale), t));
}

std::map<std::string, std::int64_t> stats() {
  codec_counters& c = the_counters();
  std::map<std::string, std::int64_t> out;
  const std::string prefix = "tensorpager.compress.";
  std::int64_t saved = 0;
  for (method m : all_methods) {
    if (m == method::none) continue;
    const method_counters& mc = c.by_method[static_cast<std::size_t>(m)];
    const std::string key = prefix + std::string(to_string(m)) + ".";
    out[key + "tensors"] = mc.tensors.load();
    out[key + "bytes_in"] = mc.bytes_in.load();
    out[key + "bytes_out"] = mc.bytes_out.load();
    out[key + "restored"] = mc.restored.load();
    saved += mc.bytes_in.load() - mc.bytes_out.load();
  }
  out[prefix + "bytes_saved"] = saved;
  out[prefix + "live_bytes"] = c.live_bytes.load();
  out[prefix + "live_bytes_peak"] = c.live_bytes_peak.load();
  return out;
}

void reset_stats() {
  codec_counters& c = the_counters();
  for (method_counters& mc : c.by_method) {
    mc.tensors = 0;
    mc.bytes_in = 0;
    mc.bytes_out = 0;
    mc.restored = 0;
  }
  c.live_bytes_peak = c.live_bytes.load();
}

}  // namespace tp::hooks::compress
