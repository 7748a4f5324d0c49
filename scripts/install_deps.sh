#!/usr/bin/env bash
# Installs what tensorpager needs to build and test, and only what is missing:
# the GPU machine has no network, so nothing present is ever re-installed.
#   Debian packages: a C++ toolchain, CMake, Ninja, fmt, GoogleTest, Google Benchmark;
#   optional ones (nlohmann-json for tests/profiler's JSON checks, Chromium for
#   the HTML timeline render test), whose tests skip or are not built without
#   them, so failing to install them (no network) is not an error.
#   Python packages: torch==2.11.0 (only where torch is absent), torchvision==0.26.0, numpy, pytest,
#   pytest-xdist, wheel.
# Usage: bash scripts/install_deps.sh [--no-python]
set -euo pipefail

PYTHON="${PYTHON:-python3}"
want_python=1
[[ "${1:-}" == "--no-python" ]] && want_python=0

log() { echo "[deps] $*"; }

as_root() {
  if [[ "$(id -u)" == 0 ]]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else log "need root for: $*"; return 1; fi
}

# Debian package -> a file that proves it is installed (cheaper than apt).
declare -A apt_probe=(
  [g++]=/usr/bin/g++
  [cmake]=/usr/bin/cmake
  [ninja-build]=/usr/bin/ninja
  [libfmt-dev]=/usr/include/fmt/format.h
  [libgtest-dev]=/usr/include/gtest/gtest.h
  [libgmock-dev]=/usr/include/gmock/gmock.h
  [libbenchmark-dev]=/usr/include/benchmark/benchmark.h
)

missing=()
for pkg in "${!apt_probe[@]}"; do
  probe="${apt_probe[$pkg]}"
  # A tool found elsewhere on PATH (the GPU machine's cmake, say) counts too.
  if [[ -e "$probe" ]] || { [[ "$probe" == /usr/bin/* ]] && command -v "$(basename "$probe")" >/dev/null; }; then
    continue
  fi
  missing+=("$pkg")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}"
else
  log "Debian packages: all present"
fi

# Optional Debian package -> the file that proves it is installed.
declare -A optional_probe=(
  [nlohmann-json3-dev]=/usr/include/nlohmann/json.hpp
  [chromium]=/usr/bin/chromium
)
optional=()
for pkg in "${!optional_probe[@]}"; do
  [[ -e "${optional_probe[$pkg]}" ]] || optional+=("$pkg")
done
if ((${#optional[@]})); then
  log "installing optional Debian packages: ${optional[*]}"
  if ! { as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${optional[@]}"; }; then
    log "could not install ${optional[*]} (no network?): the tests that need them skip or are not built"
  fi
fi

if ((want_python)); then
  pip_install() { "$PYTHON" -m pip install -q --disable-pip-version-check --root-user-action=ignore "$@"; }
  if "$PYTHON" -c "import torch" 2>/dev/null; then
    log "torch: $("$PYTHON" -c 'import torch; print(torch.__version__)') present"
  else
    log "installing torch==2.11.0"
    pip_install torch==2.11.0
  fi
  # module:package; pytest-xdist runs the Python tests on both cores (scripts/test.sh).
  for entry in numpy:numpy pytest:pytest wheel:wheel xdist:pytest-xdist; do
    mod=${entry%%:*} pkg=${entry#*:}
    if "$PYTHON" -c "import $mod" 2>/dev/null; then continue; fi
    log "installing $pkg"
    pip_install "$pkg"
  done
  # torchvision: bench/record_traces.py records ResNet-18 with it, and
  # examples/train_under_budget.py trains one (no test needs it). 0.26.0 is the release paired with torch 2.11.0.
  if ! "$PYTHON" -c "import torchvision" 2>/dev/null; then
    log "installing torchvision==0.26.0"
    pip_install torchvision==0.26.0 || log "could not install torchvision (no network?): bench/record_traces.py needs it for ResNet-18"
  fi
fi
