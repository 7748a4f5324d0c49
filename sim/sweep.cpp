#include "sim/sweep.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "config/parse_bytes.hpp"
#include "core/format_bytes.hpp"

namespace tp::sim {
namespace {

// 1.0, 0.9, 0.45: the fewest decimals (at least one) that give the ratio back.
std::string ratio_text(double r) { return format_ratio_exact(r); }

}  // namespace

std::vector<double> default_ratios() {
  std::vector<double> r;
  for (int i = 10; i >= 1; --i) r.push_back(i / 10.0);
  return r;
}

std::vector<policy_kind> all_policies() {
  return {policy_kind::lru, policy_kind::dtr, policy_kind::capuchin, policy_kind::hybrid};
}

std::size_t budget_for_ratio(const sim_report& unconstrained, double ratio) {
  return budget_for_ratio(unconstrained.peak_reserved, ratio);
}

std::size_t budget_for_ratio(std::size_t base, double ratio) {
  const double b = std::floor(static_cast<double>(base) * ratio);
  return std::max<std::size_t>(static_cast<std::size_t>(b), 1);
}

sweep_result run_sweep(const trace& t, const sim_options& base, const std::vector<double>& ratios,
                       const std::vector<policy_kind>& policies, std::optional<std::size_t> ratio_of) {
  sweep_result s;
  sim_options free_run = base;
  free_run.budget_bytes.reset();
  s.unconstrained = simulate(t, free_run);
  s.ratio_of = ratio_of;
  sim_report base_peak;
  base_peak.peak_reserved = ratio_of.value_or(s.unconstrained.peak_reserved);
  s.policies = policies;
  s.ratios = ratios;
  for (policy_kind p : policies) {
    std::vector<sweep_point> row;
    for (double ratio : ratios) {
      sim_options o = base;
      o.policy = p;
      o.budget_bytes = budget_for_ratio(base_peak, ratio);
      sweep_point pt{ratio, simulate(t, o)};
      compare(pt.report, s.unconstrained);
      row.push_back(std::move(pt));
    }
    s.points.push_back(std::move(row));
  }
  return s;
}

namespace {
std::string ms(std::int64_t ns) { return fmt::format("{:.3f} ms", static_cast<double>(ns) / 1e6); }
}  // namespace

std::string format_report(const sim_report& r) {
  std::string out;
  out += fmt::format("policy:            {}\n", to_string(r.policy));
  out += fmt::format("budget:            {}\n", r.budget_bytes ? fmt::format("{} ({} B)", format_bytes(*r.budget_bytes),
                                                                          *r.budget_bytes)
                                                             : std::string("none"));
  out += fmt::format("fits:              {}\n", r.fits ? "yes" : "no");
  if (!r.fits) out += fmt::format("why:               {}\n", r.failure);
  out += fmt::format("peak reserved:     {} ({} B)\n", format_bytes(r.peak_reserved), r.peak_reserved);
  out += fmt::format("peak allocated:    {} ({} B)\n", format_bytes(r.peak_allocated), r.peak_allocated);
  out += fmt::format("fragmentation:     {:.1f}% (1 - peak allocated / peak reserved)\n", 100 * r.fragmentation);
  if (!r.fits) return out;
  out += fmt::format("step time:         {}\n", ms(r.step_ns));
  out += fmt::format("slowdown:          {:.3f}x\n", r.slowdown);
  out += fmt::format("compute:           {}\n", ms(r.compute_ns));
  out += fmt::format("recompute:         {} ({} storages)\n", ms(r.recompute_ns), r.recomputes);
  out += fmt::format("stall:             {}\n", ms(r.stall_ns));
  out += fmt::format("host waits:        {} ({} synchronisations)\n", ms(r.host_wait_ns), r.host_syncs);
  out += fmt::format("offloaded:         {}\n", format_bytes(r.offloaded_bytes));
  out += fmt::format("prefetched:        {}\n", format_bytes(r.prefetched_bytes));
  out += fmt::format("evictions:         {} ({} drops)\n", r.evictions, r.drops);
  out += fmt::format("policy wall time:  {} (planning {})\n", ms(r.policy_wall_ns), ms(r.plan_wall_ns));
  return out;
}

std::string format_sweep_table(const sweep_result& s) {
  std::string out = fmt::format(
      "Unconstrained: peak reserved {} ({} B), peak allocated {}, step {}.{}\n\n",
      format_bytes(s.unconstrained.peak_reserved), s.unconstrained.peak_reserved,
      format_bytes(s.unconstrained.peak_allocated), ms(s.unconstrained.step_ns),
      s.ratio_of ? fmt::format(" Ratios are of {} ({} B).", format_bytes(*s.ratio_of), *s.ratio_of) : std::string());
  out += "| policy | ratio | budget | fits | slowdown | step ms | recompute ms | stall ms | host wait ms | "
         "host syncs | offloaded | prefetched | evictions | peak reserved | frag | policy ms |\n";
  out += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    for (const sweep_point& pt : s.points[p]) {
      const sim_report& r = pt.report;
      if (!r.fits) {
        out += fmt::format("| {} | {} | {} | no | | | | | | | | | | {} | | {:.3f} |\n", to_string(s.policies[p]),
                           ratio_text(pt.ratio), format_bytes(r.budget_bytes.value_or(0)), format_bytes(r.peak_reserved),
                           static_cast<double>(r.policy_wall_ns) / 1e6);
        continue;
      }
      out += fmt::format(
          "| {} | {} | {} | yes | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {:.3f} | {} | {} | {} | {} | {} | {:.1f}% | "
          "{:.3f} |\n",
          to_string(s.policies[p]), ratio_text(pt.ratio), format_bytes(r.budget_bytes.value_or(0)), r.slowdown,
          static_cast<double>(r.step_ns) / 1e6, static_cast<double>(r.recompute_ns) / 1e6,
          static_cast<double>(r.stall_ns) / 1e6, static_cast<double>(r.host_wait_ns) / 1e6, r.host_syncs,
          format_bytes(r.offloaded_bytes), format_bytes(r.prefetched_bytes),
          r.evictions, format_bytes(r.peak_reserved), 100 * r.fragmentation,
          static_cast<double>(r.policy_wall_ns) / 1e6);
    }
  }
  return out;
}

std::string format_sweep_summary(const sweep_result& s) {
  auto at = [&](std::size_t p, double ratio) -> std::string {
    for (const sweep_point& pt : s.points[p]) {
      if (std::abs(pt.ratio - ratio) < 1e-9) {
        return pt.report.fits ? fmt::format("{:.3f}", pt.report.slowdown) : std::string("does not fit");
      }
    }
    return "-";
  };
  // Fitting need not be monotone (a reclaim can free bytes that do not make
  // a block of the size asked for), so both the smallest ratio that fits and
  // the ratio down to which every ratio fits are shown.
  std::string out =
      "| policy | smallest fitting ratio | every ratio fits down to | slowdown at 0.5 | slowdown at 0.3 |\n"
      "|---|---|---|---|---|\n";
  auto ratio_or_none = [](double r) { return r < 0 ? std::string("none") : ratio_text(r); };
  for (std::size_t p = 0; p < s.points.size(); ++p) {
    double smallest = -1, down_to = -1;
    bool unbroken = true;
    for (const sweep_point& pt : s.points[p]) {  // ratios in sweep order, largest first
      if (pt.report.fits && (smallest < 0 || pt.ratio < smallest)) smallest = pt.ratio;
      unbroken = unbroken && pt.report.fits;
      if (unbroken) down_to = pt.ratio;
    }
    out += fmt::format("| {} | {} | {} | {} | {} |\n", to_string(s.policies[p]), ratio_or_none(smallest),
                       ratio_or_none(down_to), at(p, 0.5), at(p, 0.3));
  }
  return out;
}

std::string format_slowdown_matrix(const sweep_result& s, const std::vector<double>& reference,
                                   const std::string& reference_name) {
  const bool with_reference = reference.size() == s.ratios.size();
  std::string out = "| ratio | budget |";
  std::string rule = "|---|---|";
  if (with_reference) {
    out += fmt::format(" {} |", reference_name);
    rule += "---|";
  }
  for (policy_kind p : s.policies) {
    out += fmt::format(" {} |", to_string(p));
    rule += "---|";
  }
  out += "\n" + rule + "\n";
  for (std::size_t r = 0; r < s.ratios.size(); ++r) {
    const std::size_t budget = s.points.empty() ? 0 : s.points[0][r].report.budget_bytes.value_or(0);
    out += fmt::format("| {} | {} |", ratio_text(s.ratios[r]), format_bytes(budget));
    if (with_reference) {
      out += reference[r] > 0 ? fmt::format(" {:.3f} |", reference[r]) : std::string(" OOM |");
    }
    for (std::size_t p = 0; p < s.points.size(); ++p) {
      const sim_report& rep = s.points[p][r].report;
      out += rep.fits ? fmt::format(" {:.3f} |", rep.slowdown) : std::string(" no |");
    }
    out += "\n";
  }
  return out;
}

}  // namespace tp::sim
