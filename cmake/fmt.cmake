# fmt::fmt for every target: the system's fmt package when there is one,
# otherwise the fmt headers torch ships, header-only.
#
# Note [fmt without a system package]
# The GPU machine has torch, a compiler and CMake, but no network, and may
# lack libfmt-dev. torch's wheel carries fmt's headers (fmt 12 in torch 2.11,
# include/fmt), which work header-only (FMT_HEADER_ONLY). So when
# find_package(fmt) finds nothing (or is told to find nothing:
# -DCMAKE_DISABLE_FIND_PACKAGE_fmt=TRUE, which CI's main build passes to prove
# this path), the headers are copied from torch into the build folder, so
# that the layers below hooks/ see fmt and nothing else of torch, and fmt::fmt
# becomes an interface target over that copy. torch is found through
# CMAKE_PREFIX_PATH (its share/cmake folder, as scripts/build_env.sh passes
# it) or by asking the Python interpreter. Every translation unit then uses
# one fmt, the one torch itself was built with (compare Note [fmt in
# torch-facing code] in hooks/CMakeLists.txt).

find_package(fmt QUIET)
if(fmt_FOUND)
  message(STATUS "fmt: the system package (${fmt_VERSION})")
  return()
endif()

set(_tp_fmt_candidates "")
foreach(_tp_prefix IN LISTS CMAKE_PREFIX_PATH)
  # .../site-packages/torch/share/cmake -> .../site-packages/torch/include
  list(APPEND _tp_fmt_candidates "${_tp_prefix}/../../include" "${_tp_prefix}/include")
endforeach()
if(NOT Python3_EXECUTABLE)
  find_package(Python3 COMPONENTS Interpreter QUIET)
endif()
if(Python3_EXECUTABLE)
  execute_process(
    COMMAND "${Python3_EXECUTABLE}" -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'include'))"
    OUTPUT_VARIABLE _tp_torch_include OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _tp_rc)
  if(_tp_rc EQUAL 0)
    list(APPEND _tp_fmt_candidates "${_tp_torch_include}")
  endif()
endif()

set(_tp_fmt_source "")
foreach(_tp_dir IN LISTS _tp_fmt_candidates)
  if(EXISTS "${_tp_dir}/fmt/format.h" AND EXISTS "${_tp_dir}/fmt/format-inl.h")
    get_filename_component(_tp_fmt_source "${_tp_dir}" ABSOLUTE)
    break()
  endif()
endforeach()
if(NOT _tp_fmt_source)
  message(FATAL_ERROR "fmt: no system fmt package (Debian: libfmt-dev) and no torch with fmt headers "
                      "(include/fmt) on CMAKE_PREFIX_PATH or importable by ${Python3_EXECUTABLE}; install one")
endif()

set(_tp_fmt_copy "${CMAKE_BINARY_DIR}/fmt-from-torch/include")
file(REMOVE_RECURSE "${_tp_fmt_copy}/fmt")
file(COPY "${_tp_fmt_source}/fmt" DESTINATION "${_tp_fmt_copy}")
file(STRINGS "${_tp_fmt_copy}/fmt/base.h" _tp_fmt_version REGEX "#define FMT_VERSION ")
message(STATUS "fmt: no system package; header-only from ${_tp_fmt_source}/fmt (${_tp_fmt_version})")

add_library(tp_fmt_header_only INTERFACE)
target_include_directories(tp_fmt_header_only SYSTEM INTERFACE "${_tp_fmt_copy}")
target_compile_definitions(tp_fmt_header_only INTERFACE FMT_HEADER_ONLY=1)
add_library(fmt::fmt ALIAS tp_fmt_header_only)
