#!/usr/bin/env bash
# The main job, in three parts (each installs what it needs, only where missing):
#  1. replays a training-like allocation trace on the simulated device under a
#     budget that fits and one that does not: statistics, then the
#     out-of-memory message;
#  2. installs the package into .venv (which sees the system's torch) and
#     trains a small CNN on random data with no code change, under
#     PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:...": on CUDA when a
#     GPU is present, otherwise on the CPU adapter. Then once more under a
#     budget too small for it, which ends in torch.OutOfMemoryError;
#  3. trains a torchvision ResNet-18 inside tp.budget(0.5): the runtime swaps
#     and recomputes activations, and the memory timeline is written to
#     demo-out/budget_timeline.html.
# Environment: DEMO_BUDGET / DEMO_SMALL_BUDGET override the two budgets.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/build_env.sh  # after the install, which may bring torch

echo "=== 1. allocation trace replayed on the simulated device ==="
tp_configure build-demo -DTP_BUILD_TESTS=OFF
cmake --build build-demo -j "$JOBS" --target tp_budget_replay_demo
build-demo/examples/tp_budget_replay_demo

echo
echo "=== 2. a small CNN trained under a budget, no code change ==="
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv --system-site-packages .venv
fi
echo "installing tensorpager into .venv (builds the C++ extension; a minute or two)"
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
if .venv/bin/python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  budget="${DEMO_BUDGET:-1GiB}"
else
  budget="${DEMO_BUDGET:-128MiB}"  # the CNN's peak on the CPU adapter is about 96 MiB
fi
small="${DEMO_SMALL_BUDGET:-48MiB}"
(cd /tmp && PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:$budget" \
  "$OLDPWD/.venv/bin/python" "$OLDPWD/examples/train_small_cnn.py" --steps 3)
echo
echo "--- the same script under budget:$small, which is too small ---"
if (cd /tmp && PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,budget:$small" \
      "$OLDPWD/.venv/bin/python" "$OLDPWD/examples/train_small_cnn.py" --steps 1 2>&1 | tail -3); then :; fi

echo
echo "=== 3. tp.budget: a torchvision ResNet-18 under half of its first step's peak, with a timeline ==="
mkdir -p demo-out
if .venv/bin/python -c "import torchvision" 2>/dev/null; then
  .venv/bin/python examples/train_under_budget.py --steps 3 --timeline demo-out/budget_timeline.html
  echo "timeline: demo-out/budget_timeline.html (a self-contained page: open it in a browser)"
else
  echo "torchvision is missing (scripts/install_deps.sh installs it when the network allows): skipped"
fi
