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
