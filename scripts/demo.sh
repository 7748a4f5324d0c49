#!/usr/bin/env bash
# The main job, in three parts (each installs what it needs, only where missing):
#  1. replays a training-like sequence of allocations on the simulated device
#     under a budget that fits and one that does not: statistics, then the
#     out-of-memory message;
#  2. installs the package into .venv (which sees the system's torch) and
#     trains a torchvision ResNet-18 inside tp.budget(0.5): the runtime swaps
#     and recomputes activations, and the memory timeline is written to
#     demo-out/budget_timeline.html;
#  3. the headline: an unmodified script (examples/train_gpt.py) trained by
#     plain PyTorch, then at half of its peak with only
#     PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,manage:activations,budget:0.5,
#     timeline:demo-out/gpt_timeline.html": tensorpager's exit line, the
#     timeline page, and the two runs' losses compared bit for bit. On CUDA
#     when a GPU is present, otherwise on the CPU adapter.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/build_env.sh  # after the install, which may bring torch

echo "=== 1. a training-like sequence of allocations replayed on the simulated device ==="
tp_configure build-demo -DTP_BUILD_TESTS=OFF
cmake --build build-demo -j "$JOBS" --target tp_budget_replay_demo
build-demo/examples/tp_budget_replay_demo

echo
echo "=== 2. tp.budget: a torchvision ResNet-18 under half of its first step's peak, with a timeline ==="
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv --system-site-packages .venv
fi
echo "installing tensorpager into .venv (builds the C++ extension; a minute or two)"
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
mkdir -p demo-out
if .venv/bin/python -c "import torchvision" 2>/dev/null; then
  .venv/bin/python examples/train_under_budget.py --steps 3 --timeline demo-out/budget_timeline.html
  echo "timeline: demo-out/budget_timeline.html (a self-contained page: open it in a browser)"
else
  echo "torchvision is missing (scripts/install_deps.sh installs it when the network allows): skipped"
fi

echo
echo "=== 3. one variable, no code change: examples/train_gpt.py at half of its peak ==="
conf="backend:tensorpager,manage:activations,budget:0.5,timeline:$PWD/demo-out/gpt_timeline.html"
echo "--- plain PyTorch ---"
# Each run's output is shown as it comes and kept in demo-out/ to compare the losses.
(cd /tmp && env -u PYTORCH_CUDA_ALLOC_CONF "$OLDPWD/.venv/bin/python" "$OLDPWD/examples/train_gpt.py") |
  tee demo-out/gpt_plain.txt
echo "--- PYTORCH_CUDA_ALLOC_CONF=\"$conf\" ---"
(cd /tmp && PYTORCH_CUDA_ALLOC_CONF="$conf" "$OLDPWD/.venv/bin/python" "$OLDPWD/examples/train_gpt.py") |
  tee demo-out/gpt_managed.txt
losses() { grep -o "(0x[^)]*)" "$1"; }
if [[ -n "$(losses demo-out/gpt_plain.txt)" && "$(losses demo-out/gpt_plain.txt)" == "$(losses demo-out/gpt_managed.txt)" ]]; then
  echo "the losses of the two runs are bit-identical"
else
  echo "demo: the losses differ between the plain and the managed run (demo-out/gpt_*.txt)" >&2
  exit 1
fi
echo "timeline: demo-out/gpt_timeline.html (a self-contained page: open it in a browser)"
