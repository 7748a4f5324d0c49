#pragma once
// The sweep's plot: slowdown against budget ratio, one line per policy, as a
// self-contained SVG document (no scripts, no fonts or files fetched).

#include <string>

#include "sim/sweep.hpp"

namespace tp::sim {

/// An SVG document. Ratios run right to left (1.0 at the left, as budgets
/// shrink); a policy's line stops at its last fitting ratio, and ratios that
/// do not fit are marked with a cross on the top edge. `title` is escaped.
/// Pure.
std::string render_slowdown_svg(const sweep_result& s, const std::string& title);

}  // namespace tp::sim
