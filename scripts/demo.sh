#!/usr/bin/env bash
# The main job: builds tensorpager (installing what is missing) and replays a
# training-like allocation trace on the simulated device under a budget that
# fits and one that does not, printing the statistics table and the
# out-of-memory message.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/build_env.sh
bash scripts/install_deps.sh --no-python
tp_configure build-demo -DTP_BUILD_TESTS=OFF
cmake --build build-demo -j "$JOBS" --target tp_budget_replay_demo
build-demo/examples/tp_budget_replay_demo
