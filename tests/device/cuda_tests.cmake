# The CUDA device tests; tests/device/CMakeLists.txt includes this file when
# TP_WITH_CUDA is ON. Every test that needs a GPU skips, with a message, where
# there is none, so the executable passes on a machine without a driver.
add_executable(cuda_device_test ${CMAKE_CURRENT_LIST_DIR}/cuda_device_test.cpp)
target_link_libraries(cuda_device_test PRIVATE
  tp_device_conformance
  tp_device_cuda
  GTest::gtest_main
  tp_warnings
)
tp_discover_tests(cuda_device_test LABELS gpu device)

# The same device code without a GPU (label device): the real loader and
# cuda_device over a stand-in driver library that enforces CUDA's per-context
# rules (fake_libcuda.cpp), with the device and allocator conformance suites.
add_library(tp_fake_libcuda MODULE
  ${CMAKE_CURRENT_LIST_DIR}/fake_libcuda.cpp ${CMAKE_CURRENT_LIST_DIR}/fake_libcuda_streams.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fake_libcuda_vmm.cpp)
target_include_directories(tp_fake_libcuda SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_include_directories(tp_fake_libcuda PRIVATE ${PROJECT_SOURCE_DIR})
target_link_libraries(tp_fake_libcuda PRIVATE tp_warnings)
set_target_properties(tp_fake_libcuda PROPERTIES CXX_VISIBILITY_PRESET hidden)

add_executable(cuda_device_fake_driver_test ${CMAKE_CURRENT_LIST_DIR}/cuda_device_fake_driver_test.cpp)
target_link_libraries(cuda_device_fake_driver_test PRIVATE
  tp_device_conformance
  tp_allocator_conformance
  tp_device_cuda
  GTest::gtest_main
  tp_warnings
)
target_compile_definitions(cuda_device_fake_driver_test PRIVATE TP_FAKE_LIBCUDA="$<TARGET_FILE:tp_fake_libcuda>")
add_dependencies(cuda_device_fake_driver_test tp_fake_libcuda)
tp_discover_tests(cuda_device_fake_driver_test LABELS device)

# The allocator and budget runtime over the same stand-in driver, counting the
# calls that make the host wait for the device (Note [Giving memory back
# waits] in allocator/caching_allocator.hpp).
add_executable(device_syncs_fake_driver_test ${CMAKE_CURRENT_LIST_DIR}/device_syncs_fake_driver_test.cpp)
target_link_libraries(device_syncs_fake_driver_test PRIVATE tp_runtime tp_device_cuda GTest::gtest_main tp_warnings)
target_include_directories(device_syncs_fake_driver_test PRIVATE ${PROJECT_SOURCE_DIR})
target_compile_definitions(device_syncs_fake_driver_test PRIVATE TP_FAKE_LIBCUDA="$<TARGET_FILE:tp_fake_libcuda>")
add_dependencies(device_syncs_fake_driver_test tp_fake_libcuda)
tp_discover_tests(device_syncs_fake_driver_test LABELS device)
