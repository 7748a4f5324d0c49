#!/usr/bin/env bash
# Installs what is missing, builds everything, and runs every test:
#   1. the full build (CUDA and torch parts where their toolkits are present),
#      all ctest suites; tests labelled `gpu` skip themselves without a GPU;
#   2. the allocator and device suites again under AddressSanitizer +
#      UndefinedBehaviorSanitizer, and the threaded ones under ThreadSanitizer;
#   3. the package pip-installed into build/venv (which sees the system's
#      torch), then the Python tests (pytest; `gpu`-marked ones skip without a GPU).
# With torch, the build of step 1 uses torch's fmt headers instead of the
# system's (the GPU machine may have no libfmt-dev), and scripts/gpu_check.sh
# runs on it without a GPU (its CPU stages: symbols, the import check).
# Environment: JOBS (parallel jobs), TP_SKIP_SANITIZERS=1 (skip step 2),
# TP_FUZZ_OPS / TP_FUZZ_SEED (the randomised allocator test).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# After the install: build_env.sh looks for torch, which a fresh machine gets
# from install_deps.sh (sourced before it, the build would leave torch out).
source scripts/build_env.sh

step_start=$SECONDS
step_name=""
step_time() { if [[ -n "$step_name" ]]; then echo "=== $step_name: $((SECONDS - step_start)) s"; fi; }
# The total counts from the script's start, the dependency check included.
finish() { local rc=$?; step_time; echo "=== total: $SECONDS s (exit $rc)"; }
step() {
  step_time
  step_name="$*"; step_start=$SECONDS
  echo; echo "=== $* ==="
}
trap finish EXIT

# All three builds keep line tables and function names (-g1), not full debug
# information (-g): backtraces and sanitizer reports read the same, and a
# translation unit that includes torch's headers compiles in 22 s, not 38 s.
debug_args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")

# With torch, the main build pretends there is no system fmt, so it uses the
# fmt headers torch ships, header-only, as the GPU machine (which may lack
# libfmt-dev) must (Note [fmt without a system package] in cmake/fmt.cmake);
# the sanitizer builds below, without torch, use the system's fmt.
fmt_args=()
[[ "$TP_CMAKE_SUMMARY" == torch:\ yes* ]] && fmt_args=(-DCMAKE_DISABLE_FIND_PACKAGE_fmt=TRUE)
fmt_note=""; ((${#fmt_args[@]})) && fmt_note=", fmt from torch's headers (system fmt hidden)"
step "build ($TP_CMAKE_SUMMARY$fmt_note)"
tp_configure build "${TP_CMAKE_ARGS[@]}" "${fmt_args[@]}" "${debug_args[@]}" -DTP_BUILD_BENCH=ON
grep -E "^-- fmt: " "/tmp/tp-configure-build.log" || true
cmake --build build -j "$JOBS"

step "C++ tests"
ctest --test-dir build --output-on-failure -j "$JOBS"

step "GPU check without a GPU (scripts/gpu_check.sh on this build: its CPU stages, the GPU ones listed as skipped)"
bash scripts/gpu_check.sh --run --build-dir build build/gpu-check

step "GPU check plan (scripts/gpu_check.sh --dry-run: each stage's share of the lease's 8 minutes)"
bash scripts/gpu_check.sh --dry-run --build-dir build/gpu-dry build/gpu-dry/out

if [[ "$TP_CMAKE_SUMMARY" == *"CUDA toolkit: yes"* ]]; then
  # The GPU machine has no GoogleTest: the GPU test binaries must build from its
  # source (Note [GoogleTest from source] in cmake/googletest.cmake). Without
  # torch here, so it stays short; hooks_cuda_test links the same GTest targets.
  step "GPU test binaries with GoogleTest built from source (the installed one hidden)"
  tp_configure build-nogtest -DTP_WITH_CUDA=ON -DCMAKE_DISABLE_FIND_PACKAGE_GTest=TRUE "${debug_args[@]}"
  grep -E "^-- GoogleTest: " /tmp/tp-configure-build-nogtest.log
  cmake --build build-nogtest -j "$JOBS" --target cuda_device_test allocator_conformance_cuda_test
  build-nogtest/tests/device/cuda_device_test --gtest_brief=1
fi

step "timeline recording overhead (informational: build/bench/tp_profiler_bench)"
build/bench/tp_profiler_bench --summary_only

if [[ -x build/examples/tp_budget_scope_example ]]; then
  step "LibTorch example under a budget_scope (two steps)"
  build/examples/tp_budget_scope_example 2
fi

if [[ "${TP_SKIP_SANITIZERS:-0}" != 1 ]]; then
  sanitized_targets=(simulated_device_test caching_allocator_test budget_and_reclaim_test
                     allocator_conformance_simulated_test caching_allocator_fuzz_test
                     pinned_host_pool_test allocator_log_test segment_listener_test config_test
                     runtime_test eviction_policy_test runtime_budget_test runtime_fuzz_test
                     runtime_observer_test runtime_threads_test runtime_recorder_test
                     lineage_test step_planner_test copy_cost_test host_sync_test resident_floor_test
                     several_streams_test runtime_accounting_test
                     event_log_test timeline_analysis_test)
  step "allocator and device tests under ASan + UBSan"
  tp_configure build-asan -DTP_SANITIZE=address,undefined "${debug_args[@]}"
  cmake --build build-asan -j "$JOBS" --target "${sanitized_targets[@]}"
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" -L "allocator|device|fuzz|config|runtime|profiler"

  step "threaded tests under TSan"
  # Only the binaries that hold the tests run here (-R below); keep both in step.
  tsan_targets=(simulated_device_test caching_allocator_test caching_allocator_fuzz_test pinned_host_pool_test
                config_test runtime_test runtime_fuzz_test runtime_threads_test event_log_test)
  tp_configure build-tsan -DTP_SANITIZE=thread "${debug_args[@]}"
  cmake --build build-tsan -j "$JOBS" --target "${tsan_targets[@]}"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ctest --test-dir build-tsan --output-on-failure -j "$JOBS" \
      -R "Fuzz|Threads|Concurrent"
fi

if [[ -d tests/python ]]; then
  step "Python package installed into build/venv (the real pip install and start-up hook)"
  [[ -x build/venv/bin/python ]] || "$PYTHON" -m venv --system-site-packages build/venv
  # TP_BUILD_DIR: the extension of step 1, not a second compile (setup.py).
  TP_BUILD_DIR="$PWD/build" build/venv/bin/python -m pip install -q --disable-pip-version-check \
    --no-build-isolation --no-deps .

  step "Python example under tp.budget (two steps of a torchvision ResNet-18 on the CPU)"
  if build/venv/bin/python -c "import torchvision" 2>/dev/null; then
    build/venv/bin/python examples/train_under_budget.py --steps 2
  else
    echo "torchvision is missing (no network when the dependencies were installed?): skipped"
  fi

  # With pytest-xdist, one worker per job, a file's tests on one worker
  # (--dist loadfile: a module's fixtures are built once); most tests run a
  # child interpreter whose start is single-threaded, so two workers keep
  # both cores busy where one left one idle.
  parallel=()
  if ((JOBS > 1)) && build/venv/bin/python -c "import xdist" 2>/dev/null; then
    parallel=(-n "$JOBS" --dist loadfile)
  fi
  step "Python tests${parallel:+ (pytest-xdist, $JOBS workers)}"
  require_ext=0; [[ "$TP_CMAKE_SUMMARY" == torch:\ yes* ]] && require_ext=1
  TP_REQUIRE_EXT=$require_ext PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" TENSORPAGER_EXT_DIR="$PWD/build/hooks" \
    build/venv/bin/python -m pytest tests/python -q -rs --durations=12 "${parallel[@]}"
fi
