// tensorpager._C's simulator functions, for python/tensorpager/sim.py (the
// tp-sim console script and `python -m tensorpager.sim`). The contract
// (names, types, exceptions) is the one the package codes against; change
// both together.
//
//   sim_main(args: list[str]) -> tuple[int, str, str]   (exit status, stdout, stderr)
//   sim_run(trace: str, budget: int | None = None, ratio: float | None = None,
//           policy: str = "hybrid", bandwidth_gbps: float = 50.0, latency_us: float = 5.0,
//           compute_scale: float = 1.0, repeat: int = 2, expandable_segments: bool = True,
//           lend: bool = True) -> dict
//     budget (bytes) or ratio (of the unconstrained peak reserved); neither:
//     the unconstrained replay. The dict holds sim_report's fields plus
//     "unconstrained_peak_reserved" and "unconstrained_step_ns". Every
//     default is sim::sim_options{}'s, as tp-sim's command line (the values
//     above are today's: Note [The simulator's defaults] in sim/simulator.hpp).
//
// Without nlohmann-json, sim is not built (no target tp_sim,
// TP_HAVE_SIM undefined) and register_sim() adds nothing: sim.py then says
// the simulator is not built.
//
// Errors: tp::config_error (unknown policy) -> ValueError; tp::error (a
// malformed trace) -> RuntimeError, through the module's translator
// (python_module.cpp). Both release the GIL while simulating. This file
// includes no fmt (Note [fmt in torch-facing code] in CMakeLists.txt).

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#if TP_HAVE_SIM
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/errors.hpp"
#include "sim/cli.hpp"
#include "sim/dtr_import.hpp"
#include "sim/simulator.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_io.hpp"

#endif

namespace py = pybind11;

namespace tp::hooks {
#if TP_HAVE_SIM
namespace {

std::tuple<int, std::string, std::string> sim_main(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  int status = 0;
  {
    py::gil_scoped_release release;
    status = sim::run_cli(args, out, err);
  }
  return {status, out.str(), err.str()};
}

py::dict sim_run(const std::string& path, std::optional<std::size_t> budget, std::optional<double> ratio,
                 const std::string& policy, double bandwidth_gbps, double latency_us, double compute_scale,
                 std::size_t repeat, bool expandable_segments, bool lend) {
  if (budget && ratio) throw invalid_argument("sim_run: give budget (bytes) or ratio, not both");
  if (ratio && !(*ratio > 0.0 && *ratio <= 1.0)) {
    throw invalid_argument("sim_run: ratio must be in (0, 1] (a fraction of the unconstrained peak)");
  }
  if (budget && *budget == 0) throw invalid_argument("sim_run: budget must be > 0 bytes");
  sim::sim_options o;
  o.policy = parse_policy_kind(policy);
  o.bandwidth_bytes_per_s = bandwidth_gbps * 1e9;
  o.latency_ns = static_cast<std::int64_t>(latency_us * 1000.0);
  o.compute_scale = compute_scale;
  o.repeat = repeat;
  o.expandable_segments = expandable_segments;
  o.lend = lend;
  sim::sim_report free_run, r;
  {
    py::gil_scoped_release release;
    const sim::trace t = sim::looks_like_dtr(path) ? sim::import_dtr_file(path) : sim::read_trace_file(path);
    sim::sim_options unconstrained = o;
    unconstrained.budget_bytes.reset();
    free_run = sim::simulate(t, unconstrained);
    if (budget || ratio) {
      o.budget_bytes = budget ? *budget : sim::budget_for_ratio(free_run, *ratio);
      r = sim::simulate(t, o);
    } else {
      r = free_run;
    }
    sim::compare(r, free_run);
  }
  py::dict d;
  d["fits"] = r.fits;
  d["failure"] = r.failure;
  d["budget"] = r.budget_bytes ? py::cast(*r.budget_bytes) : py::none();
  d["policy"] = std::string(to_string(r.policy));
  d["peak_reserved"] = r.peak_reserved;
  d["peak_allocated"] = r.peak_allocated;
  d["fragmentation"] = r.fragmentation;
  d["step_ns"] = r.step_ns;
  d["compute_ns"] = r.compute_ns;
  d["recompute_ns"] = r.recompute_ns;
  d["stall_ns"] = r.stall_ns;
  d["slowdown"] = r.slowdown;
  d["offloaded_bytes"] = r.offloaded_bytes;
  d["prefetched_bytes"] = r.prefetched_bytes;
  d["evictions"] = r.evictions;
  d["drops"] = r.drops;
  d["recomputes"] = r.recomputes;
  d["policy_wall_ns"] = r.policy_wall_ns;
  d["unconstrained_peak_reserved"] = free_run.peak_reserved;
  d["unconstrained_step_ns"] = free_run.step_ns;
  return d;
}

}  // namespace
#endif

void register_sim([[maybe_unused]] py::module_& m) {
#if TP_HAVE_SIM
  m.def("sim_main", &sim_main, py::arg("args"),
        "Runs tp-sim's command line; returns (exit status, stdout, stderr).");
  const sim::sim_options d;  // the defaults, as the command line's
  m.def("sim_run", &sim_run, py::arg("trace"), py::arg("budget") = py::none(), py::arg("ratio") = py::none(),
        py::arg("policy") = std::string(to_string(d.policy)), py::arg("bandwidth_gbps") = d.bandwidth_bytes_per_s / 1e9,
        py::arg("latency_us") = static_cast<double>(d.latency_ns) / 1000.0, py::arg("compute_scale") = d.compute_scale,
        py::arg("repeat") = d.repeat, py::arg("expandable_segments") = d.expandable_segments, py::arg("lend") = d.lend,
        "Replays a trace (tensorpager's or a DTR log) under a budget; returns the report as a dict.");
#endif
}

}  // namespace tp::hooks
