#pragma once
// Budget sweeps and their text: one trace, every policy, budgets as ratios of
// the unconstrained replay's peak reserved bytes.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "sim/simulator.hpp"

namespace tp::sim {

/// 1.0, 0.9, ..., 0.1.
std::vector<double> default_ratios();
/// lru, dtr, capuchin, hybrid.
std::vector<policy_kind> all_policies();

struct sweep_point {
  double ratio = 1.0;
  sim_report report;
};

struct sweep_result {
  sim_report unconstrained;
  /// The bytes ratios are fractions of: none, the unconstrained replay's
  /// peak reserved bytes; else these (e.g. another simulator's baseline).
  std::optional<std::size_t> ratio_of;
  std::vector<policy_kind> policies;
  std::vector<double> ratios;
  /// points[p][r]: policies[p] at ratios[r].
  std::vector<std::vector<sweep_point>> points;
};

/// The budget for a ratio of the unconstrained peak reserved bytes (rounded
/// down, at least 1).
std::size_t budget_for_ratio(const sim_report& unconstrained, double ratio);
/// The budget for a ratio of `base` bytes (rounded down, at least 1).
std::size_t budget_for_ratio(std::size_t base, double ratio);

/// Runs the unconstrained replay, then every (policy, ratio) with `base`'s
/// other options; ratios are of ratio_of bytes when given (to compare
/// configurations against one peak), else of the unconstrained peak.
/// Deterministic except policy_wall_ns.
sweep_result run_sweep(const trace& t, const sim_options& base, const std::vector<double>& ratios,
                       const std::vector<policy_kind>& policies,
                       std::optional<std::size_t> ratio_of = std::nullopt);

/// One run as "key: value" lines. Pure.
std::string format_report(const sim_report& r);
/// A Markdown table: one row per (policy, ratio). Pure.
std::string format_sweep_table(const sweep_result& s);
/// Per policy: the smallest ratio that fits, the ratio down to which every
/// ratio fits, and the slowdown at 0.5 and 0.3 (a Markdown table). Requires:
/// ratios in descending order. Pure.
std::string format_sweep_summary(const sweep_result& s);
/// A Markdown table with one row per ratio and one slowdown column per
/// policy ("no" where it does not fit), and, when `reference` has one figure
/// per ratio, a column of those figures first ("OOM" for a figure <= 0). Pure.
std::string format_slowdown_matrix(const sweep_result& s, const std::vector<double>& reference = {},
                                   const std::string& reference_name = "reference");

}  // namespace tp::sim
