#include "config/compress_spec.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

#include "config/text.hpp"

namespace tp {
namespace {

using config_text::is_blank;
using config_text::trim;

constexpr std::array<std::string_view, 4> methods = {"pool2", "bf16", "fp8", "none"};


bool is_method(std::string_view text) {
  return std::any_of(methods.begin(), methods.end(), [text](std::string_view m) {
    return m.size() == text.size() && std::equal(m.begin(), m.end(), text.begin(), [](char a, char b) {
             return a == std::tolower(static_cast<unsigned char>(b));
           });
  });
}

/// A class name as Python spells one: a capital letter, then letters,
/// digits and '_'.
bool is_class_name(std::string_view s) {
  if (s.empty() || !std::isupper(static_cast<unsigned char>(s.front()))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

std::string compress_spec_problem(std::string_view spec) {
  const std::string_view text = trim(spec);
  if (text.empty()) return "the value is empty (write none for no compression)";
  if (text.find('=') == std::string_view::npos) {
    if (is_method(text)) return "";
    return fmt::format("'{}' is neither a method nor a Selector=method rule", text);
  }
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = std::min(text.find(';', start), text.size());
    const std::string_view rule = trim(text.substr(start, end - start));
    const std::size_t eq = rule.find('=');
    if (rule.empty()) return "a rule is empty (';' must separate two rules)";
    if (eq == std::string_view::npos) return fmt::format("rule '{}' is not Selector=method", rule);
    const std::string_view selector = trim(rule.substr(0, eq));
    const std::string_view method = trim(rule.substr(eq + 1));
    if (selector.empty()) return fmt::format("rule '{}' has no selector before '='", rule);
    if (!is_method(method)) return fmt::format("rule '{}': '{}' is not a method", rule, method);
    if (selector != "*" && !is_class_name(selector)) {
      return fmt::format("rule '{}': selector '{}' is not a module class name or *; name globs such as "
                         "layer1.* need a model: use tp.compress(spec, model=...) in code",
                         rule, selector);
    }
    if (end == text.size()) return "";
    start = end + 1;
  }
}

std::string normalize_compress_spec(std::string_view spec) {
  const std::string_view text = trim(spec);
  if (text.size() == 4 && is_method(text) && std::tolower(static_cast<unsigned char>(text[0])) == 'n') return "";
  return std::string(text);
}

}  // namespace tp
