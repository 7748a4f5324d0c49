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

// Calls `visit(op index, call number, time of the call's ops before it)` for
// every op in a segment call, in trace order.
template <class Visit>
void for_each_call_op(const trace& t, std::size_t depth, Visit visit) {
  if (depth == 0) return;
  bool in_call = false;  // whether a segment call is running, and which
  std::string_view current;
  std::int64_t elapsed = 0;
  std::size_t call = 0;
  std::size_t next_call = 0;
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
      call = next_call++;
    }
    visit(e.op, call, elapsed);
    elapsed += op.time_ns;
  }
}

std::vector<std::int64_t> segment_prefix_ns(const trace& t, std::size_t depth) {
  std::vector<std::int64_t> prefix(t.ops.size(), 0);
  for_each_call_op(t, depth, [&](std::size_t op, std::size_t, std::int64_t elapsed) { prefix[op] = elapsed; });
  return prefix;
}

std::vector<std::size_t> segment_call_of(const trace& t, std::size_t depth) {
  std::vector<std::size_t> call(t.ops.size(), no_call);
  for_each_call_op(t, depth, [&](std::size_t op, std::size_t c, std::int64_t) { call[op] = c; });
  return call;
}

}  // namespace tp::sim
