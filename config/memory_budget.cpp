#include "config/memory_budget.hpp"

#include <array>
#include <cmath>
#include <string>
#include <variant>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "core/format_bytes.hpp"
#include "config/parse_bytes.hpp"
#include "config/text.hpp"

// memory_budget: the budget grammar (Note [Budget spellings]) and resolving a
// budget against a device.

namespace tp {
namespace {

using config_text::iequals;
using config_text::trim;

struct share_word {
  std::string_view word;
  budget_share share;
};

constexpr std::array<share_word, 2> share_words = {{
    {"peak", budget_share::peak},
    {"device", budget_share::device},
}};

std::string_view word_of(budget_share s) noexcept { return s == budget_share::peak ? "peak" : "device"; }

/// text ends with word (case-insensitive): the text before it, trimmed.
std::optional<std::string_view> before_word(std::string_view text, std::string_view word) noexcept {
  if (text.size() < word.size() || !iequals(text.substr(text.size() - word.size()), word)) return std::nullopt;
  return trim(text.substr(0, text.size() - word.size()));
}

budget_parse_result refuse(std::string problem) { return {std::nullopt, std::move(problem)}; }

budget_parse_result parse_ratio_of(std::string_view text, std::string_view number, budget_share share) {
  const std::string_view word = word_of(share);
  if (!looks_like_ratio(number)) {
    return refuse(fmt::format("'{}' is not a ratio of the {}: write a number with a decimal point in (0, 1] "
                              "before '{}' (e.g. 0.5{}, 1.0{})",
                              text, word, word, word, word));
  }
  const std::optional<double> r = try_parse_ratio(number);
  if (!r) return refuse(fmt::format("'{}' is a ratio of the {} outside (0, 1]", text, word));
  return {memory_budget{budget_ratio{*r, share}}, {}};
}

}  // namespace

budget_parse_result parse_budget(std::string_view text) {
  const std::string_view t = trim(text);
  if (t.empty()) return refuse("the budget is empty");
  if (iequals(t, "none")) return {};
  for (const share_word& w : share_words) {
    if (const auto number = before_word(t, w.word)) return parse_ratio_of(t, *number, w.share);
  }
  if (looks_like_ratio(t)) {
    const std::optional<double> r = try_parse_ratio(t);
    if (!r) {
      return refuse(fmt::format("'{}' is a ratio (a number with a decimal point and no unit) outside (0, 1]; "
                                "for a size add a unit (e.g. {}GiB)",
                                t, t));
    }
    return {memory_budget{budget_ratio{*r, budget_share::peak}}, {}};
  }
  if (t == "0" || t == "1") {
    return refuse(fmt::format("'{}' is ambiguous (Note [Budget spellings]): write 1.0 for the whole peak, "
                              "1.0device for the whole device, or a size with a unit such as 12GiB",
                              t));
  }
  const bytes_parse_result b = parse_bytes(t);
  if (b.error == bytes_error::unknown_unit) return refuse(fmt::format("unknown unit '{}' in size '{}'", b.unit, t));
  if (b.error != bytes_error::none) return refuse(fmt::format("{}: '{}'", describe(b.error), t));
  if (b.bytes == 0) return refuse(fmt::format("'{}' is 0 bytes; a budget must be > 0 bytes", t));
  return {memory_budget{b.bytes}, {}};
}

std::string format_budget(const memory_budget& b) {
  if (const auto* bytes = std::get_if<std::size_t>(&b.value)) {
    if (*bytes == 0) throw config_error("a budget of 0 bytes cannot be written; use none");
    return format_size_exact(*bytes);
  }
  const budget_ratio& r = std::get<budget_ratio>(b.value);
  if (!(r.value > 0.0 && r.value <= 1.0)) {
    throw config_error(fmt::format("budget ratio {} is outside (0, 1]", r.value));
  }
  return format_ratio_exact(r.value) + (r.of == budget_share::device ? "device" : "");
}

std::optional<double> memory_budget::ratio_of(budget_share share) const noexcept {
  const auto* r = std::get_if<budget_ratio>(&value);
  if (r == nullptr || r->of != share) return std::nullopt;
  return r->value;
}

std::size_t memory_budget::resolve(std::size_t total_bytes) const noexcept {
  if (const auto* bytes = std::get_if<std::size_t>(&value)) return *bytes;
  const double scaled = std::floor(std::get<budget_ratio>(value).value * static_cast<double>(total_bytes));
  if (!(scaled > 0)) return 0;
  if (scaled >= static_cast<double>(total_bytes)) return total_bytes;
  return static_cast<std::size_t>(scaled);
}

std::size_t memory_budget::resolve_for_device(std::size_t total_bytes, std::string_view device_name) const {
  if (!resolvable_now()) {
    throw config_error(fmt::format("tensorpager: budget {} is a share of the first step's peak, which is not "
                                   "known before a step runs; for a share of {} write {}device",
                                   format_budget(*this), device_name, format_budget(*this)));
  }
  const std::size_t bytes = resolve(total_bytes);
  const std::string shown = is_bytes() ? format_bytes(bytes)
                                       : fmt::format("{} ({})", format_budget(*this), format_bytes(bytes));
  if (bytes > total_bytes) {
    throw config_error(fmt::format("tensorpager: budget {} is more than the {} of {}; choose at most {} "
                                   "(or a share such as 0.9device)",
                                   shown, format_bytes(total_bytes), device_name, format_bytes(total_bytes)));
  }
  if (bytes == 0) {
    throw config_error(fmt::format("tensorpager: budget {} is 0 bytes on {} ({}); choose a larger ratio or a size",
                                   shown, device_name, format_bytes(total_bytes)));
  }
  return bytes;
}

}  // namespace tp
