#pragma once
// The configuration grammar's text helpers: what counts as a blank, trimming
// blanks, comparing names without regard to case, and splitting entries. One
// copy for the key parser, the size parser, the compress spec and the
// formatter, so that they agree on what they trim.

#include <cstddef>
#include <string_view>
#include <vector>

namespace tp::config_text {

/// The blanks the grammar ignores around entries, keys and values.
constexpr bool is_blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/// s without leading and trailing blanks. Pure.
constexpr std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

/// ASCII case-insensitive equality ("GiB" == "gib"). Pure.
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

/// text split at ',' (outside square brackets when bracket_aware), empty
/// pieces kept. Pure; the pieces view text.
inline std::vector<std::string_view> split_entries(std::string_view text, bool bracket_aware) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (bracket_aware && ch == '[') ++depth;
    if (bracket_aware && ch == ']' && depth > 0) --depth;
    if (ch == ',' && depth == 0) {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(text.substr(start));
  return out;
}

}  // namespace tp::config_text
