#pragma once
// tp-sim's command line, as a function so that the executable, the Python
// entry point (tensorpager._C) and tests share it.
//
//   tp-sim TRACE [--budget RATIO|SIZE] [--policy lru|dtr|capuchin|hybrid]
//                [--sweep] [--plot OUT.svg] [--bandwidth GBPS] [--latency-us US]
//                [--compute-scale X] [--repeat N] [--title TEXT]
//                [--no-proactive-offload] [--no-prefetch-ahead]
//
// TRACE is tensorpager's trace format (docs/trace_format.md) or a DTR log
// (detected by content or a .log name).

#include <iosfwd>
#include <string>
#include <vector>

namespace tp::sim {

/// The usage text.
std::string cli_usage();

/// Runs the command line `args` (without the program name), writing results
/// to `out` and errors (with the usage hint) to `err`. Returns the exit
/// status: 0 on success, 2 for bad arguments or input. Thread-safety: none
/// needed (no shared state besides the streams).
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tp::sim
