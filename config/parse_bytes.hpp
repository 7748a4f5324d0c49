#pragma once
// Sizes and ratios as people write them in configuration strings.
//
// Note [Size grammar]
// A size is a number, optional blanks, and an optional unit:
//
//   number := digits [ "." digits ]          e.g. 12, 1.5, 0.25 (no sign, no exponent)
//   unit   := B                               bytes
//           | KB | MB | GB | TB               powers of 1000 (SI)
//           | KiB | MiB | GiB | TiB           powers of 1024 (IEC)
//
// Units are case-insensitive ("12gib" == "12GiB"). A number without a unit is a
// byte count and must be a whole number. A fractional number with a unit is
// allowed ("1.5GB" = 1500000000 bytes) and is rounded down to a whole byte.
// The one-letter shorthands K, M, G, T are rejected, not guessed: "12G" means
// 12 GiB to some tools and 12 GB to others (a 7% difference nobody would notice
// until a budget is wrong), so the error asks for GiB or GB. Zero is a valid
// size here; keys that need more (a budget) reject it themselves.
//
// A ratio is written with a decimal point and no unit ("0.6", "1.0") and means
// a fraction of some total (the device's memory, for a budget). Which keys take
// ratios, and how "1" is kept from meaning both "1 byte" and "everything", is
// decided in memory_budget.hpp, Note [Budget spellings].

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tp {

/// Why a size did not parse; bytes_error::none when it did.
enum class bytes_error {
  none,
  empty,                 ///< nothing but blanks
  negative,              ///< starts with '-'
  not_a_number,          ///< no digits where the number should be, or a stray character
  fraction_without_unit, ///< "1.5" with no unit: not a whole number of bytes
  ambiguous_unit,        ///< K, M, G or T alone (binary or decimal?)
  unknown_unit,          ///< anything else after the number ("12GB B", "12 gigs")
  overflow,              ///< more bytes than std::size_t holds
};

/// A size parsed with the details messages and callers need. Trivially copyable;
/// `unit` views the input text.
struct bytes_parse_result {
  std::size_t bytes = 0;            ///< the size, rounded down; 0 unless error == none
  bytes_error error = bytes_error::none;
  bool has_unit = false;            ///< a unit was written
  bool has_point = false;           ///< the number had a decimal point
  std::string_view unit;            ///< the unit as written (for "unknown unit 'GB B'")
};

/// Parses text (blanks around it are ignored) by Note [Size grammar]. Pure,
/// thread-safe, never throws; every failure is reported in the result.
bytes_parse_result parse_bytes(std::string_view text) noexcept;

/// The size in text, or nullopt when it is not a size by Note [Size grammar].
/// Pure, thread-safe, never throws.
std::optional<std::size_t> try_parse_bytes(std::string_view text) noexcept;

/// The ratio in text, or nullopt. A ratio is digits "." digits with no unit and
/// a value in (0, 1]: "0.6", "1.0", "0.05". "1", "0", ".5", "60%" are not
/// ratios. Pure, thread-safe, never throws.
std::optional<double> try_parse_ratio(std::string_view text) noexcept;

/// True when text, with blanks trimmed, looks like a number with a point and
/// nothing else ("1.5", "0.0"): the shape of a ratio, whatever its value.
bool looks_like_ratio(std::string_view text) noexcept;

/// What went wrong, in words, for error messages ("unknown unit"). Never empty
/// for an error other than none.
std::string_view describe(bytes_error e) noexcept;

/// The accepted size forms, for error messages and documentation.
inline constexpr std::string_view accepted_size_forms =
    "a whole number of bytes (4096), or a number with a unit: B; KB, MB, GB, TB (powers of "
    "1000); KiB, MiB, GiB, TiB (powers of 1024); units are case-insensitive, e.g. 12GiB, "
    "512MB, 1.5GB, 100KB";

/// parse_bytes(text).bytes; throws tp::config_error quoting the text (cut at
/// 80 characters), saying what is wrong and listing accepted_size_forms.
std::size_t parse_size_or_throw(std::string_view text);

/// core/format_bytes.hpp's "1.50 GiB", compiled here, for torch-facing code,
/// which must not instantiate fmt itself (Note [fmt in torch-facing code] in
/// hooks/CMakeLists.txt).
std::string format_bytes_text(std::size_t bytes);

/// Formats bytes exactly, in a form parse_bytes reads back to the same value:
/// with the largest unit, binary or decimal, that divides it exactly ("12GiB",
/// "512MB", "1536B"). Zero is "0B".
/// Pure, thread-safe.
std::string format_size_exact(std::size_t bytes);

/// Formats a ratio with a decimal point, in the fewest digits that
/// try_parse_ratio reads back to exactly the same double ("0.6", "1.0").
/// Requires: 0 < ratio <= 1.
std::string format_ratio_exact(double ratio);

}  // namespace tp
