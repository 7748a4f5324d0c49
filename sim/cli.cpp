#include "sim/cli.hpp"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <optional>
#include <vector>
#include <ostream>

#include "core/errors.hpp"
#include "config/memory_budget.hpp"
#include "config/parse_bytes.hpp"
#include "core/format_bytes.hpp"
#include "sim/dtr_import.hpp"
#include "sim/least_budget.hpp"
#include "sim/lend_plan.hpp"
#include "sim/slowdown_svg.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_io.hpp"

namespace tp::sim {
namespace {

struct cli_args {
  std::string trace_path;
  std::optional<std::size_t> ratio_of;  ///< --ratio-of: the bytes ratios are fractions of
  std::vector<double> ratios;           ///< --ratios (sweeps); empty: 1.0..0.1
  std::vector<double> reference;        ///< --reference: figures beside the sweep's
  std::optional<double> ratio;
  std::optional<std::size_t> budget_bytes;
  policy_kind policy = sim_options{}.policy;
  bool sweep = false;
  bool ratio_of_plain = false;  // --ratio-base plain
  std::string plot;
  std::string title;
  sim_options options;
};

double parse_number(const std::string& flag, const std::string& text, const char* accepted) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    throw config_error(fmt::format("tp-sim: {} '{}' is not a number; accepted: {}", flag, text, accepted));
  }
  return v;
}

void parse_budget_arg(const std::string& text, cli_args& a) {
  const budget_parse_result r = parse_budget(text);  // Note [Budget spellings]
  if (!r.ok()) throw config_error(fmt::format("tp-sim: --budget '{}': {}; accepted: {}", text, r.problem, accepted_budget_forms));
  if (!r.budget) return;  // none: only the unconstrained replay
  if (r.budget->ratio_of(budget_share::device)) {
    throw config_error(fmt::format("tp-sim: --budget '{}' is a share of a device, and a trace is replayed on "
                                   "none; give a ratio of the unconstrained peak ({}) or a size",
                                   text, format_ratio_exact(*r.budget->ratio_of(budget_share::device))));
  }
  a.ratio = r.budget->ratio_of(budget_share::peak);
  if (r.budget->is_bytes()) a.budget_bytes = std::get<std::size_t>(r.budget->value);
}

cli_args parse(const std::vector<std::string>& args) {
  cli_args a;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw config_error(fmt::format("tp-sim: {} needs a value", arg));
      return args[++i];
    };
    if (arg == "--budget") {
      parse_budget_arg(value(), a);
    } else if (arg == "--policy") {
      a.policy = parse_policy_kind(value());
    } else if (arg == "--sweep") {
      a.sweep = true;
    } else if (arg == "--plot") {
      a.plot = value();
      a.sweep = true;
    } else if (arg == "--title") {
      a.title = value();
    } else if (arg == "--bandwidth") {
      const double gbps = parse_number(arg, value(), "GB/s > 0, e.g. 50");
      if (!(gbps > 0)) throw config_error("tp-sim: --bandwidth must be > 0 GB/s");
      a.options.bandwidth_bytes_per_s = gbps * 1e9;
    } else if (arg == "--latency-us") {
      const double us = parse_number(arg, value(), "microseconds >= 0, e.g. 5");
      if (!(us >= 0)) throw config_error("tp-sim: --latency-us must be >= 0");
      a.options.latency_ns = static_cast<std::int64_t>(us * 1000.0);
    } else if (arg == "--compute-scale") {
      const double x = parse_number(arg, value(), "a factor > 0, e.g. 0.1");
      if (!(x > 0)) throw config_error("tp-sim: --compute-scale must be > 0");
      a.options.compute_scale = x;
    } else if (arg == "--repeat") {
      const double n = parse_number(arg, value(), "an integer >= 1");
      if (!(n >= 1) || n != static_cast<double>(static_cast<std::size_t>(n))) {
        throw config_error("tp-sim: --repeat must be an integer >= 1");
      }
      a.options.repeat = static_cast<std::size_t>(n);
    } else if (arg == "--sample") {
      const double n = parse_number(arg, value(), "an integer >= 1");
      if (!(n >= 1) || n != static_cast<double>(static_cast<std::size_t>(n))) {
        throw config_error("tp-sim: --sample must be an integer >= 1");
      }
      a.options.sample_size = static_cast<std::size_t>(n);
    } else if (arg == "--max-split-mb") {
      const double mb = parse_number(arg, value(), "MiB > 1, e.g. 20");
      if (!(mb > 1)) throw config_error("tp-sim: --max-split-mb must be > 1");
      a.options.max_split_size = static_cast<std::size_t>(mb * 1024 * 1024);
    } else if (arg == "--ratio-of") {
      const bytes_parse_result b = parse_bytes(value());
      if (b.error != bytes_error::none || b.bytes == 0) {
        throw config_error(fmt::format("tp-sim: --ratio-of needs a size > 0 ({})", accepted_size_forms));
      }
      a.ratio_of = b.bytes;
    } else if (arg == "--ratios" || arg == "--reference") {
      std::vector<double>& list = arg == "--ratios" ? a.ratios : a.reference;
      const std::string text = value();
      std::size_t from = 0;
      while (from <= text.size()) {
        const std::size_t comma = std::min(text.find(',', from), text.size());
        list.push_back(parse_number(arg, text.substr(from, comma - from), "numbers separated by commas"));
        from = comma + 1;
      }
      if (arg == "--ratios") {
        for (double r : list) {
          if (!(r > 0 && r <= 1)) throw config_error("tp-sim: --ratios must lie in (0, 1]");
        }
      }
    } else if (arg == "--segment-depth") {
      const double n = parse_number(arg, value(), "an integer >= 0");
      if (!(n >= 0) || n != static_cast<double>(static_cast<std::size_t>(n))) {
        throw config_error("tp-sim: --segment-depth must be an integer >= 0");
      }
      a.options.segment_depth = static_cast<std::size_t>(n);
    } else if (arg == "--no-proactive-offload") {
      a.options.proactive_offload = false;
    } else if (arg == "--no-prefetch-ahead") {
      a.options.prefetch_ahead = false;
    } else if (arg == "--expandable-segments") {
      const std::string& v = value();
      if (v != "True" && v != "False") {
        throw config_error(fmt::format("tp-sim: --expandable-segments '{}'; accepted: True, False", v));
      }
      a.options.expandable_segments = v == "True";
    } else if (arg == "--lend") {
      const std::string& v = value();
      if (v != "True" && v != "False") throw config_error(fmt::format("tp-sim: --lend '{}'; accepted: True, False", v));
      a.options.lend = v == "True";
    } else if (arg == "--ratio-base") {
      const std::string& v = value();
      if (v != "plain" && v != "same") {
        throw config_error(fmt::format("tp-sim: --ratio-base '{}'; accepted: same, plain", v));
      }
      a.ratio_of_plain = v == "plain";
    } else if (arg == "-h" || arg == "--help") {
      a.trace_path = "--help";
      return a;
    } else if (!arg.empty() && arg[0] == '-') {
      throw config_error(fmt::format("tp-sim: unknown option '{}'", arg));
    } else if (a.trace_path.empty()) {
      a.trace_path = arg;
    } else {
      throw config_error(fmt::format("tp-sim: more than one trace given ('{}' and '{}')", a.trace_path, arg));
    }
  }
  if (a.trace_path.empty()) throw config_error("tp-sim: no TRACE given");
  return a;
}

// Note [Least budget], as one line.
std::string describe_least_budget(const trace& t, bool lend) {
  const lend_plan plan = lend ? lend_plan::build(t) : lend_plan{};
  const least_budget least = find_least_budget(t, lend ? &plan : nullptr);
  return fmt::format("least budget: {} ({} B): at op {} ({}), {} of untracked storages held beside its own; "
                     "no policy fits below it",
                     format_bytes(least.bytes), least.bytes, least.op, t.ops.empty() ? "none" : t.ops[least.op].name,
                     format_bytes(least.held));
}

}  // namespace

std::string cli_usage() {
  // The defaults are printed from sim_options{} (Note [The simulator's defaults]).
  const sim_options d;
  auto word = [](bool b) { return b ? "True" : "False"; };
  return fmt::format(
      "usage: tp-sim TRACE [--budget RATIO|SIZE] [--policy lru|dtr|capuchin|hybrid]\n"
      "              [--sweep] [--plot OUT.svg] [--title TEXT] [--bandwidth GBPS]\n"
      "              [--latency-us US] [--compute-scale X] [--repeat N]\n"
      "              [--no-proactive-offload] [--no-prefetch-ahead] [--sample K] [--max-split-mb MB]\n"
      "              [--ratio-of SIZE] [--ratios R,R,...] [--reference X,X,...]\n"
      "              [--expandable-segments True|False] [--ratio-base same|plain] [--lend True|False]\n"
      "              [--segment-depth N]\n"
      "TRACE: a tensorpager trace (docs/trace_format.md) or a DTR log.\n"
      "--budget: a ratio of the unconstrained peak reserved bytes (0.5 or 0.5peak) or a size (12GiB);\n"
      "  none: only the unconstrained replay. --sweep: ratios 1.0..0.1 for every policy.\n"
      "--policy: default {}, the runtime's.\n"
      "Copies: --bandwidth {:g} (GB/s) and --latency-us {:g} by default (PCIe 5.0 x16, pinned).\n"
      "--ratio-of: ratios are of this many bytes (another simulator's baseline peak);\n"
      "  --reference: that simulator's slowdowns at --ratios, printed beside tensorpager's.\n"
      "--expandable-segments: the allocator's segments (default {}, the runtime's expandable_segments).\n"
      "  --ratio-base plain: ratios are of the unconstrained peak with plain segments (to compare the two).\n"
      "--lend: lend the runtime what each backward no longer needs (default {}, as tp.budget() and\n"
      "  manage:all; False as manage:activations). DTR's simulator ran on plain segments with nothing\n"
      "  lent: compare with it under --expandable-segments False --lend False (docs/simulator.md).\n"
      "--segment-depth N: a dropped storage costs its module segment's forward up to it, as the live\n"
      "  runtime's recompute with segment_depth N (default 0: its operator alone; docs/simulator.md).\n",
      to_string(d.policy), d.bandwidth_bytes_per_s / 1e9, static_cast<double>(d.latency_ns) / 1e3,
      word(d.expandable_segments), word(d.lend));
}

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  try {
    cli_args a = parse(args);
    if (a.trace_path == "--help") {
      out << cli_usage();
      return 0;
    }
    const trace t = looks_like_dtr(a.trace_path) ? import_dtr_file(a.trace_path) : read_trace_file(a.trace_path);
    out << fmt::format("trace {}: {} source, {} storages, {} ops, {} step(s), compute {:.3f} ms (x{})\n",
                       a.trace_path, t.source, t.storages.size(), t.ops.size(), t.steps(),
                       static_cast<double>(t.compute_ns()) / 1e6 * a.options.compute_scale,
                       a.options.compute_scale);
    out << fmt::format("copies: {:.1f} GB/s, {} us latency; replays: {} (the last is measured); {} segments; {}{}\n",
                       a.options.bandwidth_bytes_per_s / 1e9, static_cast<double>(a.options.latency_ns) / 1e3,
                       a.options.repeat, a.options.expandable_segments ? "expandable" : "plain",
                       a.options.lend ? "lending" : "nothing lent",
                       a.options.segment_depth == 0
                           ? std::string()
                           : fmt::format("; recompute per module segment at depth {}", a.options.segment_depth));
    out << describe_least_budget(t, a.options.lend) << "\n\n";
    std::optional<std::size_t> base = a.ratio_of;
    if (a.ratio_of_plain) {
      sim_options plain = a.options;
      plain.expandable_segments = false;
      base = simulate(t, plain).peak_reserved;
    }
    if (a.sweep) {
      const sweep_result s =
          run_sweep(t, a.options, a.ratios.empty() ? default_ratios() : a.ratios, all_policies(), base);
      if (base) out << fmt::format("ratios are of {} B\n\n", *base);
      out << format_slowdown_matrix(s, a.reference) << '\n';
      out << format_sweep_table(s) << '\n' << format_sweep_summary(s);
      if (!a.plot.empty()) {
        std::ofstream svg(a.plot);
        if (!svg) throw error(fmt::format("tp-sim: cannot write --plot '{}'", a.plot));
        svg << render_slowdown_svg(s, a.title.empty() ? fmt::format("Slowdown vs budget: {}", a.trace_path) : a.title);
        out << fmt::format("\nplot: {}\n", a.plot);
      }
      return 0;
    }
    sim_options free_run = a.options;
    const sim_report unconstrained = simulate(t, free_run);
    if (!a.ratio && !a.budget_bytes) {
      out << format_report(unconstrained);
      return 0;
    }
    sim_options o = a.options;
    o.policy = a.policy;
    const std::size_t of = base.value_or(unconstrained.peak_reserved);
    o.budget_bytes = a.ratio ? budget_for_ratio(of, *a.ratio) : *a.budget_bytes;
    sim_report r = simulate(t, o);
    compare(r, unconstrained);
    if (a.ratio) out << fmt::format("budget ratio:      {:.3f} of {} B\n", *a.ratio, of);
    out << format_report(r);
    return 0;
  } catch (const error& e) {
    err << e.what() << '\n' << cli_usage();
    return 2;
  }
}

}  // namespace tp::sim
