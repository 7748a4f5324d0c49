// tp-sim: the trace-driven simulator's command line (cli.hpp).

#include <iostream>
#include <string>
#include <vector>

#include "sim/cli.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return tp::sim::run_cli(args, std::cout, std::cerr);
}
