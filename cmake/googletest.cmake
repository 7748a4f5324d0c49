# GTest::gtest, GTest::gtest_main and GTest::gmock for the test suites.
#
# Note [GoogleTest from source]
# The GPU machine has no network and most likely no libgtest-dev, and its lease
# is too short to lose to a missing package: without an installed GoogleTest,
# the suites build against GoogleTest's source instead. TP_GTEST_SOURCE_DIR
# names it; by default the first of an ignored copy in the tree
# (.deps/googletest, which scripts/gpu_check.sh --stage-deps fills and the
# GPU call carries) and Debian's /usr/src/googletest (libgtest-dev ships its
# source there). GoogleTest's own CMake defines the GTest:: aliases, so the
# suites link the same names either way. CI configures once with
# -DCMAKE_DISABLE_FIND_PACKAGE_GTest=TRUE to keep this path working.
find_package(GTest QUIET)
if(GTest_FOUND)
  message(STATUS "GoogleTest: installed")
  return()
endif()
set(TP_GTEST_SOURCE_DIR "" CACHE PATH "GoogleTest's source, used when no installed GoogleTest is found")
set(_tp_gtest_candidates "${TP_GTEST_SOURCE_DIR}" "${PROJECT_SOURCE_DIR}/.deps/googletest" /usr/src/googletest)
set(_tp_gtest_source "")
foreach(_tp_dir IN LISTS _tp_gtest_candidates)
  if(_tp_dir AND EXISTS "${_tp_dir}/googletest/CMakeLists.txt" AND EXISTS "${_tp_dir}/googlemock/CMakeLists.txt")
    set(_tp_gtest_source "${_tp_dir}")
    break()
  endif()
endforeach()
if(NOT _tp_gtest_source)
  message(FATAL_ERROR "GoogleTest: no installed package and no source in any of '${_tp_gtest_candidates}'. "
                      "Install libgtest-dev and libgmock-dev, pass -DTP_GTEST_SOURCE_DIR=<googletest source>, "
                      "or -DTP_BUILD_TESTS=OFF")
endif()
message(STATUS "GoogleTest: built from source (${_tp_gtest_source})")
set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
set(BUILD_GMOCK ON CACHE BOOL "" FORCE)
# Its sources compile with its own flags; -Werror and tensorpager's warnings stay ours.
set(_tp_system "")
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.25)
  set(_tp_system SYSTEM)  # its headers as -isystem, out of reach of our warnings
endif()
add_subdirectory("${_tp_gtest_source}" "${CMAKE_BINARY_DIR}/_deps/googletest" EXCLUDE_FROM_ALL ${_tp_system})
foreach(_tp_target gtest gtest_main gmock gmock_main)
  if(NOT TARGET GTest::${_tp_target})
    add_library(GTest::${_tp_target} ALIAS ${_tp_target})
  endif()
endforeach()
