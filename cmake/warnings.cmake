# tp_warnings: the warning set every tensorpager target compiles with.
add_library(tp_warnings INTERFACE)
target_compile_options(tp_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual -Wnull-dereference>)
option(TP_WERROR "Treat warnings as errors" ON)
if(TP_WERROR)
  target_compile_options(tp_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
