#include "config/parse_bytes.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <limits>
#include <system_error>

#include <fmt/format.h>

#include "config/text.hpp"
#include "core/errors.hpp"
#include "core/format_bytes.hpp"

namespace tp {
namespace {

using config_text::iequals;
using config_text::is_blank;
using config_text::trim;

constexpr std::size_t size_max = std::numeric_limits<std::size_t>::max();

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

struct unit_entry {
  std::string_view name;
  std::size_t multiplier;
};

constexpr std::size_t kib = 1024;
constexpr std::size_t kb = 1000;

constexpr std::array<unit_entry, 9> units = {{
    {"TiB", kib * kib * kib * kib},
    {"GiB", kib * kib * kib},
    {"MiB", kib * kib},
    {"KiB", kib},
    {"TB", kb * kb * kb * kb},
    {"GB", kb * kb * kb},
    {"MB", kb * kb},
    {"KB", kb},
    {"B", 1},
}};

// Requires: a and b fit; returns false on overflow.
bool checked_mul_add(std::size_t a, std::size_t mul, std::size_t add, std::size_t& out) noexcept {
  if (mul != 0 && a > (size_max - add) / mul) return false;
  out = a * mul + add;
  return true;
}

bytes_parse_result fail(bytes_error e, bytes_parse_result r = {}) noexcept {
  r.bytes = 0;
  r.error = e;
  return r;
}

}  // namespace

bytes_parse_result parse_bytes(std::string_view text) noexcept {
  text = trim(text);
  bytes_parse_result r;
  if (text.empty()) return fail(bytes_error::empty);
  if (text.front() == '-') return fail(bytes_error::negative);

  std::size_t i = 0;
  std::size_t whole = 0;
  bool overflow = false;
  while (i < text.size() && is_digit(text[i])) {
    const auto d = static_cast<std::size_t>(text[i] - '0');
    if (!checked_mul_add(whole, 10, d, whole)) overflow = true;
    ++i;
  }
  if (i == 0) return fail(bytes_error::not_a_number);

  std::string_view fraction;
  if (i < text.size() && text[i] == '.') {
    r.has_point = true;
    const std::size_t start = ++i;
    while (i < text.size() && is_digit(text[i])) ++i;
    if (i == start) return fail(bytes_error::not_a_number, r);
    fraction = text.substr(start, i - start);
  }

  const std::string_view unit = trim(text.substr(i));
  r.unit = unit;
  r.has_unit = !unit.empty();
  std::size_t multiplier = 1;
  if (r.has_unit) {
    const unit_entry* found = nullptr;
    for (const auto& u : units) {
      if (iequals(unit, u.name)) found = &u;
    }
    if (found == nullptr) {
      const bool one_letter = unit.size() == 1 && std::string_view("kmgtKMGT").find(unit[0]) !=
                                                      std::string_view::npos;
      return fail(one_letter ? bytes_error::ambiguous_unit : bytes_error::unknown_unit, r);
    }
    multiplier = found->multiplier;
  } else if (r.has_point) {
    return fail(bytes_error::fraction_without_unit, r);
  }
  if (overflow) return fail(bytes_error::overflow, r);

  // floor(0.d1d2...dn * multiplier), from the last digit inwards:
  // floor((d_k * m + floor(x)) / 10) == floor((d_k * m + x) / 10), so each step
  // stays below 10 * m and nothing overflows however many digits there are.
  std::size_t frac_bytes = 0;
  for (auto it = fraction.rbegin(); it != fraction.rend(); ++it) {
    const auto d = static_cast<std::size_t>(*it - '0');
    frac_bytes = (d * multiplier + frac_bytes) / 10;
  }
  if (!checked_mul_add(whole, multiplier, frac_bytes, r.bytes)) return fail(bytes_error::overflow, r);
  return r;
}

std::optional<std::size_t> try_parse_bytes(std::string_view text) noexcept {
  const bytes_parse_result r = parse_bytes(text);
  if (r.error != bytes_error::none) return std::nullopt;
  return r.bytes;
}

bool looks_like_ratio(std::string_view text) noexcept {
  text = trim(text);
  std::size_t i = 0;
  while (i < text.size() && is_digit(text[i])) ++i;
  if (i == 0 || i == text.size() || text[i] != '.') return false;
  const std::size_t start = ++i;
  while (i < text.size() && is_digit(text[i])) ++i;
  return i > start && i == text.size();
}

std::optional<double> try_parse_ratio(std::string_view text) noexcept {
  text = trim(text);
  if (!looks_like_ratio(text)) return std::nullopt;
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value,
                                         std::chars_format::fixed);
  if (ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  if (!(value > 0.0 && value <= 1.0)) return std::nullopt;
  return value;
}

std::string_view describe(bytes_error e) noexcept {
  switch (e) {
    case bytes_error::none: return "no error";
    case bytes_error::empty: return "the size is empty";
    case bytes_error::negative: return "a size cannot be negative";
    case bytes_error::not_a_number: return "the size does not start with a number";
    case bytes_error::fraction_without_unit:
      return "a number with a decimal point needs a unit to be a size (bytes are whole)";
    case bytes_error::ambiguous_unit:
      return "one-letter units are ambiguous; write KiB/MiB/GiB/TiB (1024) or KB/MB/GB/TB (1000)";
    case bytes_error::unknown_unit: return "unknown unit";
    case bytes_error::overflow: return "the size is too large";
  }
  return "unknown error";
}

std::size_t parse_size_or_throw(std::string_view text) {
  const bytes_parse_result r = parse_bytes(text);
  if (r.error == bytes_error::none) return r.bytes;
  const std::string shown =
      text.size() <= 80 ? std::string(text) : fmt::format("{}... ({} characters)", text.substr(0, 80), text.size());
  const std::string problem =
      r.error == bytes_error::unknown_unit ? fmt::format("unknown unit '{}'", r.unit) : std::string(describe(r.error));
  throw config_error(fmt::format("'{}' is not a size: {}. Accepted: {}", shown, problem, accepted_size_forms));
}

std::string format_bytes_text(std::size_t bytes) { return format_bytes(bytes); }

std::string format_size_exact(std::size_t bytes) {
  if (bytes == 0) return "0B";
  const unit_entry* best = &units.back();  // "B" divides everything
  for (const auto& u : units) {
    if (bytes % u.multiplier == 0 && u.multiplier > best->multiplier) best = &u;
  }
  return fmt::format("{}{}", bytes / best->multiplier, best->name);
}

std::string format_ratio_exact(double ratio) {
  for (int precision = 1; precision <= 40; ++precision) {
    std::string s = fmt::format("{:.{}f}", ratio, precision);
    const auto back = try_parse_ratio(s);
    if (back && *back == ratio) return s;
  }
  return fmt::format("{:.40f}", ratio);
}

}  // namespace tp
