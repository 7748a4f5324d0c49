# Sourced by the scripts: what this machine can build, as CMake arguments.
#   TP_CMAKE_ARGS    -DTP_WITH_TORCH / -DTP_WITH_CUDA and torch's CMake prefix
#   TP_CMAKE_SUMMARY one line saying what was found
#   tp_configure DIR [ARGS...]   configures a build folder with Ninja
PYTHON="${PYTHON:-python3}"
JOBS="${JOBS:-$(nproc)}"
export PYTHON JOBS

TP_CMAKE_ARGS=()
TP_CMAKE_SUMMARY=""
if torch_prefix="$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)"; then
  TP_CMAKE_ARGS+=(-DTP_WITH_TORCH=ON "-DCMAKE_PREFIX_PATH=$torch_prefix")
  TP_CMAKE_SUMMARY+="torch: yes"
else
  TP_CMAKE_SUMMARY+="torch: no"
fi
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  TP_CMAKE_ARGS+=(-DTP_WITH_CUDA=ON)
  TP_CMAKE_SUMMARY+=", CUDA toolkit: yes"
else
  TP_CMAKE_SUMMARY+=", CUDA toolkit: no"
fi

tp_configure() {
  local dir="$1"; shift
  cmake -S . -B "$dir" -G Ninja "$@" >"/tmp/tp-configure-$(basename "$dir").log" 2>&1 || {
    cat "/tmp/tp-configure-$(basename "$dir").log"; return 1; }
}
