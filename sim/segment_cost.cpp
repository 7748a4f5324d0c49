#include "sim/segment_cost.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace tp::sim {
namespace {

// The first `depth` dotted names of label, or none when it has fewer.
std::optional<std::string_view> segment_of(std::string_view label, std::size_t depth) {
  if (label.empty()) return std::nullopt;
  std::size_t end = 0;
  for (std::size_t k = 0; k < depth; ++k) {
    if (k > 0) {
      if (end == label.size()) return std::nullopt;
      ++end;  // past the '.'
    }
    end = std::min(label.find('.', end), label.size());
  }
  return label.substr(0, end);
}

}  // namespace

std::vector<std::int64_t> segment_prefix_ns(const trace& t, std::size_t depth) {
  std::vector<std::int64_t> prefix(t.ops.size(), 0);
  if (depth == 0) return prefix;
  bool in_call = false;  // whether a segment call is running, and which
  std::string_view current;
  std::int64_t elapsed = 0;
  for (const event& e : t.events) {
    if (e.what == event::kind::step) in_call = false;
    if (e.what != event::kind::op) continue;
    const op_record& op = t.ops[e.op];
    const std::optional<std::string_view> seg =
        op.when == phase::forward ? segment_of(op.module, depth) : std::nullopt;
    if (!seg) {
      in_call = false;
      continue;
    }
    if (!in_call || *seg != current) {
      in_call = true;
      current = *seg;
      elapsed = 0;
    }
    prefix[e.op] = elapsed;
    elapsed += op.time_ns;
  }
  return prefix;
}

}  // namespace tp::sim
