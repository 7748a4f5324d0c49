#!/usr/bin/env bash
# GPU bring-up in one command (issue 15): builds against the installed torch,
# runs every GPU check and benchmark, and writes OUT/gpu-report.md with the
# GPU, the versions, the commit, every figure and every failure with its log.
#
#   scripts/gpu_check.sh [--build-only | --run] [--build-dir DIR] [OUT]
#
#   (no flag)     build, then run                           OUT defaults to gpu-check-out
#   --build-only  configure and build DIR (default build-gpu) and stop; its log
#                 and status stay in DIR for the run step's report
#   --run         run the stages against DIR, built before; no build
#
# On a machine where each command may take at most 10 minutes (the GPU
# machine), use two: `scripts/gpu_check.sh --build-only OUT` (about 2-4 min on
# 16 cores), then `scripts/gpu_check.sh --run OUT` (about 6-8 min; the budget
# benchmark is cut at GPU_CHECK_BUDGET_TIMEOUT seconds, 300 by default). Set
# TP_COMMIT when the copy of the tree has no .git. The machine needs torch
# (with CUDA), cmake, ninja or make, a C++ compiler and nvcc, no network: fmt
# comes from torch's headers when the system has none; without GoogleTest the
# C++ tests are not built and without pytest the Python ones are not run, and
# the report says so.
#
# Without a GPU it runs the stages that need none (environment, the symbols
# check, the import check) and lists the GPU stages it skipped; CI runs it that
# way against its own build (`--run --build-dir build`), in seconds.
# Exit status: 0 when no stage failed (skipped stages are not failures), 1
# otherwise, 2 for bad arguments.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

mode=all
build_dir=build-gpu
out=""
while (($#)); do
  case "$1" in
    --build-only) mode=build ;;
    --run) mode=run ;;
    --build-dir) build_dir="$2"; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
    *) out="$1" ;;
  esac
  shift
done
out="${out:-gpu-check-out}"
mkdir -p "$out/logs"
out="$(cd "$out" && pwd)"
build_name="$build_dir"  # as given, for the report
build_dir="$(mkdir -p "$build_dir" && cd "$build_dir" && pwd)"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" TENSORPAGER_EXT_DIR="$build_dir/hooks"

# --- stages: name, needs-GPU, status, seconds ---------------------------------------
stages=()
declare -A status seconds note
record() {  # record NAME STATUS SECONDS [NOTE]
  stages+=("$1"); status[$1]="$2"; seconds[$1]="$3"; note[$1]="${4:-}"
}
skip() { record "$1" skipped 0 "$2"; echo "=== $1: skipped ($2)"; }
# run_stage NAME COMMAND...: runs it with its output in logs/NAME.log.
run_stage() {
  local name="$1"; shift
  echo "=== $name"
  local t0=$SECONDS rc
  "$@" >"$out/logs/$name.log" 2>&1
  rc=$?
  local result=passed
  ((rc == 0)) || result="failed (exit $rc)"
  ((rc == 124 || rc == 137)) && result="failed (timed out)"
  record "$name" "$result" $((SECONDS - t0))
  tail -n 3 "$out/logs/$name.log" | sed 's/^/    /'
  echo "    -> $result in $((SECONDS - t0)) s"
}

# --- build ------------------------------------------------------------------------------
build() {
  source scripts/build_env.sh
  local args=("${TP_CMAKE_ARGS[@]}" -DTP_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  local generator=Ninja
  command -v ninja >/dev/null || generator="Unix Makefiles"
  echo "configure ($generator): $TP_CMAKE_SUMMARY"
  if ! cmake -S . -B "$build_dir" -G "$generator" "${args[@]}"; then
    # GoogleTest is the dependency the GPU machine is most likely to lack.
    echo "configure failed; trying again without the C++ tests (TP_BUILD_TESTS=OFF)"
    cmake -S . -B "$build_dir" -G "$generator" "${args[@]}" -DTP_BUILD_TESTS=OFF || return 1
  fi
  timeout "${GPU_CHECK_BUILD_TIMEOUT:-540}" cmake --build "$build_dir" -j "$JOBS"
}

if [[ "$mode" != run ]]; then
  t0=$SECONDS
  build >"$build_dir/gpu-check-build.log" 2>&1
  rc=$?
  echo "$rc $((SECONDS - t0))" >"$build_dir/gpu-check-build.status"
  tail -n 5 "$build_dir/gpu-check-build.log"
  echo "build: exit $rc in $((SECONDS - t0)) s (log: $build_dir/gpu-check-build.log)"
fi
if [[ -f "$build_dir/gpu-check-build.status" ]]; then
  read -r build_rc build_s <"$build_dir/gpu-check-build.status"
  cp "$build_dir/gpu-check-build.log" "$out/logs/build.log"
  if ((build_rc == 0)); then record build passed "$build_s"; else record build "failed (exit $build_rc)" "$build_s"; fi
else
  record build "not run here" 0 "$build_name was built outside gpu_check.sh"
fi
if [[ "$mode" == build ]]; then
  [[ "${status[build]}" == passed || "${status[build]}" == "not run here" ]] && exit 0 || exit 1
fi

# --- environment --------------------------------------------------------------------------
has_gpu=0
gpu_line="none (no NVIDIA driver or no GPU visible)"
driver="none"
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu_line="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -n 1)"
  driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
  has_gpu=1
fi
# torch's view (NVML-based: it does not initialise CUDA).
torch_line="$("$PYTHON" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "devices", torch.cuda.device_count())' 2>&1 | tail -n 1)"
[[ "$torch_line" =~ devices\ ([1-9][0-9]*)$ ]] && has_gpu=1
commit="${TP_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"
if [[ -z "${TP_COMMIT:-}" ]] && git rev-parse HEAD >/dev/null 2>&1 && [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then
  commit+=" (with uncommitted changes)"
fi
{
  echo "gpu: $gpu_line"; echo "driver: $driver"; echo "torch: $torch_line"
  echo "python: $("$PYTHON" -V 2>&1)"; echo "cmake: $(cmake --version | head -n 1)"
  echo "nvcc: $( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | tail -n 1)"
  echo "compiler: $(c++ --version | head -n 1)"; echo "commit: $commit"; echo "host: $(hostname)"
} >"$out/logs/environment.log" 2>&1
record environment passed 0
cat "$out/logs/environment.log"

# --- stages that need no GPU --------------------------------------------------------------
shopt -s nullglob
ext=("$build_dir"/hooks/_C*.so)
with_cuda=0
[[ -f "$build_dir/device/cuda/libtp_device_cuda.a" ]] && with_cuda=1
if ((with_cuda)); then
  symbol_targets=("$build_dir/device/cuda/libtp_device_cuda.a" "${ext[@]}")
  [[ -x "$build_dir/tests/device/cuda_device_test" ]] && symbol_targets+=("$build_dir/tests/device/cuda_device_test")
  run_stage symbols "$PYTHON" scripts/check_cuda_symbols.py "${symbol_targets[@]}"
else
  skip symbols "built without CUDA (TP_WITH_CUDA off: no nvcc?)"
fi

# import: `import torch` with tensorpager installed on CUDA makes no CUDA call,
# and a child forked afterwards can open a device (on a machine without a GPU,
# it reports "no CUDA device" cleanly).
import_check() {
  PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,device:cuda" HAS_GPU=$has_gpu "$PYTHON" - <<'EOF'
import os, sys
import tensorpager._startup  # what the installed .pth line runs
import torch, tensorpager as tp
from tensorpager import _ext
ext = _ext.load()
calls = ext.cuda_driver_calls()
maps = open("/proc/self/maps").read()
print("installed:", tp.is_installed(), tp.device_kind(), "| driver calls after import:", calls,
      "| torch.cuda initialised:", torch.cuda.is_initialized(), "| libcuda mapped:", "libcuda.so" in maps)
assert tp.is_installed() and tp.device_kind() == "cuda"
assert calls == 0 and not torch.cuda.is_initialized() and "libcuda.so" not in maps, "a CUDA call at import"
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    try:
        msg = "device 0: " + ext.cuda_device_name(0)
        if os.environ["HAS_GPU"] == "1":
            x = torch.arange(1 << 20, device="cuda", dtype=torch.float64)
            msg += f"; a tensor through tensorpager: sum {x.sum().item():.0f}, tensorpager allocated {tp.stats()['allocated_bytes.all.current']}"
    except Exception as e:  # noqa: BLE001
        msg = f"error: {e}"
    os.write(w, msg.encode()); os._exit(0)
os.close(w)
msg = os.read(r, 4096).decode(); os.waitpid(pid, 0)
print("forked child:", msg)
if os.environ["HAS_GPU"] == "1":
    assert msg.startswith("device 0:") and "sum 549755289600" in msg, msg
else:
    assert "no CUDA device" in msg, msg
EOF
}
if ((with_cuda)) && ((${#ext[@]})); then
  run_stage import import_check
else
  skip import "no tensorpager._C built with CUDA"
fi

# --- stages that need a GPU ----------------------------------------------------------------
gpu_stage() {  # gpu_stage NAME COMMAND...
  if ((has_gpu)); then run_stage "$@"; else skip "$1" "no GPU"; fi
}
if [[ -f "$build_dir/CTestTestfile.cmake" && -d "$build_dir/tests" ]]; then
  gpu_stage ctest-gpu ctest --test-dir "$build_dir" -L gpu --output-on-failure --timeout 180
else
  skip ctest-gpu "the C++ tests are not built (GoogleTest missing?)"
fi
if "$PYTHON" -c "import pytest" 2>/dev/null; then
  gpu_stage pytest-gpu "$PYTHON" -m pytest -m gpu tests/python -q -rs -p no:cacheprovider
else
  skip pytest-gpu "pytest is not installed"
fi
gpu_stage alloc-latency "$PYTHON" bench/cuda_alloc_latency.py --json "$out/alloc_latency.json"
gpu_stage budget-bench timeout "${GPU_CHECK_BUDGET_TIMEOUT:-300}" "$PYTHON" bench/budget_bench.py --device cuda \
  --scale 4 --steps 3 --warmup 2 --out "$out/budget_cuda.md"
if [[ -f bench/max_batch.py ]]; then
  gpu_stage max-batch timeout "${GPU_CHECK_MAX_BATCH_TIMEOUT:-150}" "$PYTHON" bench/max_batch.py --device cuda
else
  skip max-batch "bench/max_batch.py does not exist in this tree"
fi

# --- the report ---------------------------------------------------------------------------
report="$out/gpu-report.md"
failed=0
{
  echo "# tensorpager GPU check"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit, $( ((has_gpu)) && echo "GPU run" || echo "no GPU: CPU stages only")"
  echo
  sed 's/^/- /' "$out/logs/environment.log"
  echo
  echo "| stage | result | seconds | log |"
  echo "|---|---|---|---|"
  for s in "${stages[@]}"; do
    log="-"; [[ -f "$out/logs/$s.log" ]] && log="logs/$s.log"
    echo "| $s | ${status[$s]}${note[$s]:+ (${note[$s]})} | ${seconds[$s]} | $log |"
  done
  echo
  if [[ -f "$out/alloc_latency.json" ]]; then
    echo "## Allocator latency through torch.empty"; echo
    sed -n '/^torch.empty/,$p' "$out/logs/alloc-latency.log"; echo
  fi
  if [[ -f "$out/budget_cuda.md" ]]; then
    echo "## Training under a budget (bench/budget_bench.py --device cuda --scale 4)"; echo
    sed '1,/^$/d' "$out/budget_cuda.md"; echo
  elif [[ -f "$out/logs/budget-bench.log" ]]; then
    echo "## Training under a budget: rows finished before the stage ended"; echo
    grep '^| ' "$out/logs/budget-bench.log" || echo "(none)"; echo
  fi
  if [[ -f "$out/logs/max-batch.log" ]]; then
    echo "## Largest batch (bench/max_batch.py --device cuda)"; echo
    tail -n 40 "$out/logs/max-batch.log"; echo
  fi
  echo "## Failures"; echo
  for s in "${stages[@]}"; do
    [[ "${status[$s]}" == failed* ]] || continue
    failed=1
    echo "### $s: ${status[$s]}"; echo; echo '```'
    tail -n 80 "$out/logs/$s.log" 2>/dev/null
    echo '```'; echo
  done
  ((failed)) || echo "None."
} >"$report"
for s in "${stages[@]}"; do [[ "${status[$s]}" == failed* ]] && failed=1; done
echo
echo "gpu_check: report in $report"
for s in "${stages[@]}"; do printf '  %-14s %s\n' "$s" "${status[$s]}${note[$s]:+ (${note[$s]})}"; done
exit "$failed"
