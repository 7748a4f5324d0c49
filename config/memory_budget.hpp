#pragma once
// A memory budget as people write it, and the one parser every front door
// uses (the budget key, tp.install, tp.set_budget, tp.budget, tp-sim
// --budget; Python reaches it through the extension, _C.parse_budget, and
// has no parser of its own).
//
// Note [Budget spellings]
//   budget := "none"                  no budget
//           | size                    bytes > 0 (Note [Size grammar]): 12GiB, 4096
//           | ratio                   a share of the peak: 0.5
//           | ratio blanks? "peak"    the same, said in full: 0.5peak
//           | ratio blanks? "device"  a share of the device's memory: 0.9device
//   ratio  := digits "." digits, in (0, 1]
// Words are case-insensitive, like units.
//
// There are two fractions and each has its own name. "The peak" is the
// measured peak of reserved bytes of the first step that runs with no budget
// (tp.budget, manage:activations; for tp-sim, the unconstrained replay's
// peak): "train at half of what it needs", which is what tensorpager is for,
// so the bare ratio means it. "The device" is the device's total memory, a
// cap known before anything runs (PyTorch's set_per_process_memory_fraction).
// Before, a bare ratio meant the device at some front doors and the peak at
// others, and `budget:0.5` changed meaning with `manage`.
//
// A front door that cannot measure what a ratio is a share of refuses it,
// naming the other spelling: tp.set_budget and the budget key without
// manage:activations cap the allocator now, before any step (a peak ratio is
// refused); tp-sim replays a trace of no particular device (a device ratio is
// refused). "0" and "1" are refused as ambiguous (bytes, or a share?): write
// 1.0, 1.0device or 1B.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace tp {

/// What a budget ratio is a share of (Note [Budget spellings]).
enum class budget_share {
  peak,    ///< the measured peak reserved bytes of the first step
  device,  ///< the device's total memory
};

/// A ratio in (0, 1] of a budget_share. A value type.
struct budget_ratio {
  double value = 1.0;
  budget_share of = budget_share::peak;

  friend bool operator==(const budget_ratio&, const budget_ratio&) = default;
};

/// A budget as written: bytes, or a ratio of the peak or of the device. A
/// value type.
struct memory_budget {
  std::variant<std::size_t, budget_ratio> value;

  bool is_bytes() const noexcept { return std::holds_alternative<std::size_t>(value); }
  /// A ratio of share, or nullopt.
  std::optional<double> ratio_of(budget_share share) const noexcept;
  /// Whether the budget is known before any step runs: bytes or a share of
  /// the device.
  bool resolvable_now() const noexcept { return !ratio_of(budget_share::peak); }
  /// The budget in bytes on a device with total_bytes of memory; a ratio is
  /// rounded down. Requires: resolvable_now(). Pure.
  std::size_t resolve(std::size_t total_bytes) const noexcept;
  /// resolve(), refusing what cannot work on that device: more bytes than it
  /// has, or a ratio that rounds to 0 bytes. Throws tp::config_error naming
  /// the budget, the device and its memory. Requires: resolvable_now().
  std::size_t resolve_for_device(std::size_t total_bytes, std::string_view device_name) const;

  friend bool operator==(const memory_budget&, const memory_budget&) = default;
};

/// What parse_budget() found: a budget, none (the text said "none"), or why
/// the text is no budget.
struct budget_parse_result {
  std::optional<memory_budget> budget;  ///< nullopt for "none" or an error
  std::string problem;                  ///< empty unless the text is no budget

  bool ok() const noexcept { return problem.empty(); }
};

/// Parses text (blanks around it are ignored) by Note [Budget spellings].
/// The problem, when there is one, quotes the text and says what is wrong
/// and what would be right; callers add who they are. Pure, thread-safe.
budget_parse_result parse_budget(std::string_view text);

/// The spelling parse_budget() reads back to b: "12GiB", "0.5", "0.9device".
/// Throws tp::config_error for 0 bytes or a ratio outside (0, 1]. Pure.
std::string format_budget(const memory_budget& b);

/// The accepted spellings, for error messages and documentation.
inline constexpr std::string_view accepted_budget_forms =
    "a size > 0 (12GiB, 4096), a ratio of the first step's peak (0.5 or 0.5peak), a ratio of the "
    "device's memory (0.9device), or none; a ratio has a decimal point and lies in (0, 1]";

}  // namespace tp
