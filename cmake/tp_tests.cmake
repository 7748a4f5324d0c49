# tp_discover_tests(<target> LABELS <label>... [DISCOVERY_TIMEOUT <s>])
#
# gtest_discover_tests with a list of ctest labels. CMake 3.25's
# gtest_discover_tests keeps only the first label of `PROPERTIES LABELS "a;b"`
# (the list is spliced into set_tests_properties unquoted), so the labels are
# applied by a script that ctest runs after the discovered tests are defined.
function(tp_discover_tests target)
  cmake_parse_arguments(arg "" "DISCOVERY_TIMEOUT" "LABELS" ${ARGN})
  if(NOT arg_DISCOVERY_TIMEOUT)
    set(arg_DISCOVERY_TIMEOUT 60)
  endif()
  gtest_discover_tests(${target} DISCOVERY_TIMEOUT ${arg_DISCOVERY_TIMEOUT} TEST_LIST ${target}_TESTS)
  set(script "${CMAKE_CURRENT_BINARY_DIR}/${target}_all_labels.cmake")
  file(WRITE "${script}"
    "if(${target}_TESTS)\n"
    "  set_tests_properties(\${${target}_TESTS} PROPERTIES LABELS \"${arg_LABELS}\")\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()
