#!/usr/bin/env bash
# GPU bring-up in one command of the lease (issues 15 and 29): records what the
# machine has, builds there only what runs there, runs every GPU check and
# benchmark, each within its share of an 8-minute plan, and rewrites
# OUT/gpu-report.md after every stage, so that a kill leaves what was learnt.
#
#   scripts/gpu_check.sh [MODE] [--build-dir DIR] [OUT]          OUT defaults to gpu-check-out
#
#   (no mode)     build, then run every stage                   (the lease's one command)
#   --dry-run     walk every stage with its commands stubbed, print each stage's share
#                 and fail if the plan outgrows GPU_CHECK_TOTAL (CI runs this)
#   --stage-deps  on a machine with network: copy GoogleTest's source into
#                 .deps/googletest, which the GPU call carries (docs/gpu_checks.md)
#   --build-only  configure and build DIR (default build-gpu) and stop
#   --run         run the stages against DIR, built before; no build
#
# OUT receives at most five files: gpu-report.md, logs.tar.gz (every stage's
# log), alloc_latency.json, budget_cuda.md and max_batch.md; the GPU machine
# returns at most eight. Each stage may run until the end of its share counted
# from the start, so time a stage leaves goes to the next; a benchmark cut
# there is a partial result, not a failure. GPU_CHECK_TOTAL (seconds, 480 by
# default) scales nothing: it is the ceiling the dry run holds the plan to. Set
# TP_COMMIT when the copy of the tree has no .git; GPU_CHECK_CMAKE_ARGS adds to
# the build's configure.
#
# Without a GPU it runs the stages that need none (environment, the symbols
# check, the import check) and lists the GPU stages it skipped; CI runs it that
# way against its own build (`--run --build-dir build`), in seconds.
# Exit status: 0 when no stage failed (skipped and partial stages are not
# failures), 1 otherwise, 2 for bad arguments.
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
    --dry-run) mode=dry ;;
    --stage-deps) mode=deps ;;
    --build-dir) build_dir="$2"; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
    *) out="$1" ;;
  esac
  shift
done

if [[ "$mode" == deps ]]; then
  src="${GTEST_SOURCE:-/usr/src/googletest}"
  if [[ -f .deps/googletest/googletest/CMakeLists.txt ]]; then
    echo "gpu_check: .deps/googletest is there already"
  elif [[ -f "$src/googletest/CMakeLists.txt" ]]; then
    mkdir -p .deps && cp -r "$src" .deps/googletest && echo "gpu_check: copied $src to .deps/googletest"
  else
    echo "gpu_check: no GoogleTest source at $src (apt-get install libgtest-dev, or set GTEST_SOURCE)" >&2
    exit 1
  fi
  echo "carry .deps in the GPU call (docs/gpu_checks.md)"; exit 0
fi

out="${out:-gpu-check-out}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
build_name="$build_dir"  # as given, for the report
build_dir="$(mkdir -p "$build_dir" && cd "$build_dir" && pwd)"
logs="$build_dir/gpu-check-logs"  # outside OUT: it comes back as one tarball
rm -rf "$logs" && mkdir -p "$logs"
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
export PYTHON JOBS
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" TENSORPAGER_EXT_DIR="$build_dir/hooks"
export PYTHONUNBUFFERED=1

# --- the plan: each stage's share of the lease, in seconds ----------------------
# Sized for an H100 machine (16 cores): the stages that answer the most come
# first, the long benchmarks last. A stage may run until the sum of the shares
# up to it, counted from the start.
TOTAL="${GPU_CHECK_TOTAL:-480}"
plan=(environment:10 build:150 symbols:10 import:20 ctest-gpu:50 pytest-budget:110 pytest-gpu:70
      alloc-latency:30 budget-bench:20 max-batch:10)
partial_ok=" budget-bench max-batch "  # cut at its share: a partial result
declare -A share until
sum=0
for entry in "${plan[@]}"; do
  name="${entry%%:*}"; share[$name]="${entry##*:}"; sum=$((sum + ${entry##*:})); until[$name]=$sum
done
t_start=$SECONDS

# --- stages: name, status, seconds, note ------------------------------------------
stages=()
declare -A status seconds note
record() {  # record NAME STATUS SECONDS [NOTE]
  stages+=("$1"); status[$1]="$2"; seconds[$1]="$3"; note[$1]="${4:-}"
  write_report
}
skip() { echo "=== $1: skipped ($2)"; record "$1" skipped 0 "$2"; }
# The seconds stage NAME may still use: until the end of its share.
time_left() { echo $(( ${until[$1]} - (SECONDS - t_start) )); }
# run_stage NAME COMMAND...: runs it under its time limit, output in the stage's log.
run_stage() {
  local name="$1"; shift
  local limit; limit=$(time_left "$name")
  if [[ "$mode" == dry ]]; then
    printf '=== %-14s share %3d s, until %3d s: %s\n' "$name" "${share[$name]}" "${until[$name]}" "$*"
    record "$name" "dry run" 0 "share ${share[$name]} s"
    return
  fi
  if ((limit < 5)); then skip "$name" "no time left in its share"; return; fi
  echo "=== $name (up to $limit s)"
  # timeout runs programs: a function of this script runs in a bash of its own.
  if declare -F "$1" >/dev/null; then export -f "$1"; set -- bash -c '"$@"' bash "$@"; fi
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  local result=passed extra=""
  ((rc == 0)) || result="failed (exit $rc)"
  if ((rc == 124 || rc == 137)); then
    if [[ "$partial_ok" == *" $name "* ]]; then result=partial; extra="cut at its share, $limit s"
    else result="failed (timed out at $limit s)"; fi
  fi
  tail -n 3 "$logs/$name.log" | sed 's/^/    /'
  echo "    -> $result in $((SECONDS - t0)) s"
  record "$name" "$result" $((SECONDS - t0)) "$extra"
}

# --- the report, rewritten after every stage ----------------------------------------
report="$out/gpu-report.md"
write_report() {
  local failed_any=0 s log
  {
    echo "# tensorpager GPU check"
    echo
    echo "$(date -u '+%Y-%m-%d %H:%M UTC'), commit ${commit:-unknown}, ${run_kind:-starting}"
    echo
    [[ -f "$logs/environment.log" ]] && sed 's/^/- /' "$logs/environment.log" && echo
    echo "| stage | result | seconds | share |"
    echo "|---|---|---|---|"
    for s in "${stages[@]}"; do
      echo "| $s | ${status[$s]}${note[$s]:+ (${note[$s]})} | ${seconds[$s]} | ${share[$s]:-} |"
    done
    echo
    echo "Logs: logs.tar.gz (one file per stage)."
    echo
    if [[ -f "$out/alloc_latency.json" && -f "$logs/alloc-latency.log" ]]; then
      echo "## Allocator latency through torch.empty"; echo
      sed -n '/^torch.empty/,$p' "$logs/alloc-latency.log"; echo
    fi
    if [[ -f "$out/budget_cuda.md" ]]; then
      echo "## Training under a budget (bench/budget_bench.py --device cuda --scale 4)"; echo
      sed '1,/^$/d' "$out/budget_cuda.md"; echo
    elif [[ -f "$logs/budget-bench.log" ]]; then
      echo "## Training under a budget: rows finished before the stage ended"; echo
      grep '^| ' "$logs/budget-bench.log" || echo "(none)"; echo
    fi
    if [[ -f "$logs/max-batch.log" ]]; then
      echo "## Largest batch (bench/max_batch.py --device cuda)"; echo
      tail -n 40 "$logs/max-batch.log"; echo
    fi
    echo "## Failures"; echo
    for s in "${stages[@]}"; do
      [[ "${status[$s]}" == failed* ]] || continue
      failed_any=1
      log="$logs/$s.log"; [[ "$s" == build ]] && log="$logs/build.log"
      echo "### $s: ${status[$s]}"; echo; echo '```'
      tail -n 60 "$log" 2>/dev/null
      echo '```'; echo
    done
    ((failed_any)) || echo "None."
  } >"$report.tmp" && mv "$report.tmp" "$report"
  [[ "$mode" == dry ]] || tar -czf "$out/logs.tar.gz" -C "$logs" . 2>/dev/null
}

# --- environment: what the machine has, in the first seconds ---------------------------
has_gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then has_gpu=1; fi
torch_line="$("$PYTHON" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "devices", torch.cuda.device_count())' 2>&1 | tail -n 1)"
[[ "$torch_line" =~ devices\ ([1-9][0-9]*)$ ]] && has_gpu=1
commit="${TP_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}"
if [[ -z "${TP_COMMIT:-}" ]] && git rev-parse HEAD >/dev/null 2>&1 && [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then
  commit+=" (with uncommitted changes)"
fi
run_kind="$( ((has_gpu)) && echo "GPU run" || echo "no GPU: CPU stages only")"
[[ "$mode" == dry ]] && run_kind="dry run: every stage walked, nothing run but this list"
header_exists() { for d in /usr/include /usr/local/include; do [[ -f "$d/$1" ]] && { echo yes; return; }; done; echo no; }
has_module() { "$PYTHON" -c "import $1" 2>/dev/null && echo yes || echo no; }
{
  if ((has_gpu)); then
    echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)"
  else
    echo "gpu: none (no NVIDIA driver or no GPU visible)"
  fi
  echo "torch: $torch_line"
  echo "python: $("$PYTHON" -V 2>&1); pytest $(has_module pytest), pytest-timeout $(has_module pytest_timeout), torchvision $(has_module torchvision)"
  echo "Python.h: $("$PYTHON" -c 'import os, sysconfig; h = os.path.join(sysconfig.get_paths()["include"], "Python.h"); print(h if os.path.isfile(h) else "missing (" + h + "): the extension cannot build")' 2>&1)"
  echo "cmake: $(cmake --version 2>/dev/null | head -n 1); ninja $(ninja --version 2>/dev/null || echo none)"
  echo "nvcc: $( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | tail -n 1)"
  echo "compiler: $(c++ --version 2>/dev/null | head -n 1)"
  echo "headers: gtest $(header_exists gtest/gtest.h), gmock $(header_exists gmock/gmock.h), benchmark $(header_exists benchmark/benchmark.h), fmt $(header_exists fmt/format.h); GoogleTest source in .deps: $([[ -f .deps/googletest/googletest/CMakeLists.txt ]] && echo yes || echo no)"
  echo "cores: $(nproc); memory: $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo); kernel: $(uname -r)"
  echo "commit: $commit"
} >"$logs/environment.log" 2>&1
record environment passed $((SECONDS - t_start))
cat "$logs/environment.log"
((has_gpu)) && nvidia-smi >>"$logs/environment-nvidia-smi.log" 2>&1
[[ "$mode" == dry ]] && has_gpu=1  # walk every stage
export has_gpu

# --- build: only what runs here --------------------------------------------------------
# The extension and the GPU test binaries; warnings are not errors (a newer
# compiler must not stop the only run); GoogleTest from .deps when the machine
# has none (Note [GoogleTest from source] in cmake/googletest.cmake).
build() {
  # The toolkit's usual home, where nvcc is not on PATH (build_env.sh and
  # torch's CMake config look for it there).
  if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
  source scripts/build_env.sh
  local args=("${TP_CMAKE_ARGS[@]}" -DTP_WERROR=OFF -DTP_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
              "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
  # GPU_CHECK_CMAKE_ARGS: more, such as -DCMAKE_DISABLE_FIND_PACKAGE_GTest=TRUE to
  # try here the GoogleTest the GPU machine lacks.
  read -ra extra <<<"${GPU_CHECK_CMAKE_ARGS:-}"
  args+=("${extra[@]}")
  local generator=Ninja
  command -v ninja >/dev/null || generator="Unix Makefiles"
  echo "configure ($generator): $TP_CMAKE_SUMMARY"
  if ! cmake -S . -B "$build_dir" -G "$generator" "${args[@]}"; then
    echo "configure failed; trying again without the C++ tests (TP_BUILD_TESTS=OFF)"
    cmake -S . -B "$build_dir" -G "$generator" "${args[@]}" -DTP_BUILD_TESTS=OFF || return 1
  fi
  local known targets=()
  known="$(cmake --build "$build_dir" --target help 2>/dev/null)"
  for t in _C cuda_device_test allocator_conformance_cuda_test hooks_cuda_test; do
    grep -qE "(^|[ :])$t(:| |$)" <<<"$known" && targets+=("$t")
  done
  ((${#targets[@]})) || { echo "nothing to build: neither torch nor CUDA was found"; return 1; }
  echo "building: ${targets[*]}"
  cmake --build "$build_dir" -j "$JOBS" --target "${targets[@]}"
}
if [[ "$mode" == all || "$mode" == build || "$mode" == dry ]]; then
  if [[ "$mode" == dry ]]; then
    run_stage build "configure $build_name (TP_WERROR=OFF) and build _C cuda_device_test allocator_conformance_cuda_test hooks_cuda_test"
  else
    limit=$(time_left build)
    echo "=== build (up to $limit s)"
    t0=$SECONDS
    export -f build; export build_dir
    timeout --kill-after=10 "$limit" bash -c build >"$logs/build.log" 2>&1
    rc=$?
    echo "$rc $((SECONDS - t0))" >"$build_dir/gpu-check-build.status"
    cp "$logs/build.log" "$build_dir/gpu-check-build.log"
    tail -n 5 "$logs/build.log" | sed 's/^/    /'
    result=passed; ((rc == 0)) || result="failed (exit $rc)"
    ((rc == 124 || rc == 137)) && result="failed (timed out at $limit s)"
    echo "    -> $result in $((SECONDS - t0)) s"
    record build "$result" $((SECONDS - t0))
  fi
elif [[ -f "$build_dir/gpu-check-build.status" ]]; then
  read -r build_rc build_s <"$build_dir/gpu-check-build.status"
  cp "$build_dir/gpu-check-build.log" "$logs/build.log"
  if ((build_rc == 0)); then record build passed "$build_s" "by --build-only"
  else record build "failed (exit $build_rc)" "$build_s" "by --build-only"; fi
else
  record build "not run here" 0 "$build_name was built outside gpu_check.sh"
fi
if [[ "$mode" == build ]]; then
  [[ "${status[build]}" == passed ]] && exit 0 || exit 1
fi

# --- stages that need no GPU --------------------------------------------------------------
shopt -s nullglob
ext=("$build_dir"/hooks/_C*.so)
with_cuda=0
[[ -f "$build_dir/device/cuda/libtp_device_cuda.a" || "$mode" == dry ]] && with_cuda=1
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
# torch 2.11's CUDA wheels map libcuda at `import torch` themselves (cuBLASLt
# opens it), so the driver library may be mapped only where plain torch maps it.
import_check() {
  local torch_maps
  torch_maps="$("$PYTHON" -c "import torch; print(int('libcuda.so' in open('/proc/self/maps').read()))")"
  PYTORCH_CUDA_ALLOC_CONF="backend:tensorpager,device:cuda" HAS_GPU=$has_gpu TORCH_MAPS_LIBCUDA=$torch_maps \
    "$PYTHON" - <<'EOF'
import os, sys
import tensorpager._startup  # what the installed .pth line runs
import torch, tensorpager as tp
from tensorpager import _ext
ext = _ext.load()
calls = ext.cuda_driver_calls()
maps = open("/proc/self/maps").read()
print("installed:", tp.is_installed(), tp.device_kind(), "| driver calls after import:", calls,
      "| torch.cuda initialised:", torch.cuda.is_initialized(), "| libcuda mapped:", "libcuda.so" in maps,
      "(by plain torch too:", os.environ["TORCH_MAPS_LIBCUDA"] == "1", ")")
assert tp.is_installed() and tp.device_kind() == "cuda"
assert calls == 0 and not torch.cuda.is_initialized(), "a CUDA call at import"
assert ("libcuda.so" in maps) <= (os.environ["TORCH_MAPS_LIBCUDA"] == "1"), "libcuda mapped at import"
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
if [[ "$mode" == dry ]] || { ((with_cuda)) && ((${#ext[@]})); }; then
  run_stage import import_check
else
  skip import "no tensorpager._C built with CUDA"
fi

# --- stages that need a GPU ----------------------------------------------------------------
gpu_stage() {  # gpu_stage NAME COMMAND...
  if ((has_gpu)); then run_stage "$@"; else skip "$1" "no GPU"; fi
}
if [[ "$mode" == dry || -f "$build_dir/CTestTestfile.cmake" && -d "$build_dir/tests" ]]; then
  gpu_stage ctest-gpu ctest --test-dir "$build_dir" -L gpu --output-on-failure --timeout 120
else
  skip ctest-gpu "the C++ tests are not built (no GoogleTest, installed or in .deps?)"
fi
if "$PYTHON" -c "import pytest" 2>/dev/null || [[ "$mode" == dry ]]; then
  pytest_args=(-m gpu -rA -p no:cacheprovider --durations=10)
  "$PYTHON" -c "import pytest_timeout" 2>/dev/null && pytest_args+=(--timeout=150)
  # The budget runtime's correctness on CUDA first: it answers the most.
  gpu_stage pytest-budget "$PYTHON" -m pytest "${pytest_args[@]}" tests/python/test_gpu_budget.py
  gpu_stage pytest-gpu "$PYTHON" -m pytest "${pytest_args[@]}" tests/python --ignore=tests/python/test_gpu_budget.py
else
  skip pytest-budget "pytest is not installed"
  skip pytest-gpu "pytest is not installed"
fi
gpu_stage alloc-latency "$PYTHON" bench/cuda_alloc_latency.py --json "$out/alloc_latency.json"
gpu_stage budget-bench "$PYTHON" bench/budget_bench.py --device cuda --scale 4 --steps 3 --warmup 2 \
  --out "$out/budget_cuda.md"
gpu_stage max-batch "$PYTHON" bench/max_batch.py --device cuda --out "$out/max_batch.md"

failed=0
for s in "${stages[@]}"; do [[ "${status[$s]}" == failed* ]] && failed=1; done
echo
if [[ "$mode" == dry ]]; then
  echo "gpu_check: dry run; the plan's shares add up to $sum s of the $TOTAL s allowed"
  if ((sum > TOTAL)); then
    echo "gpu_check: the plan ($sum s) outgrows the lease's $TOTAL s: shrink a share in scripts/gpu_check.sh" >&2
    exit 1
  fi
  exit 0
fi
echo "gpu_check: report in $report, logs in $out/logs.tar.gz ($((SECONDS - t_start)) s)"
for s in "${stages[@]}"; do printf '  %-14s %s\n' "$s" "${status[$s]}${note[$s]:+ (${note[$s]})}"; done
exit "$failed"
