# ctest compile-fail.<name>: compiles tests/compile_fail/<name>.cu (as C++ with the sim backend) and
# passes when the outcome is the one its "// expect:" line names: a compile error whose text holds the
# given message, or "(compiles)". So an API refusal made with static_assert is tested like a thrown one.
# Inputs: -DSOURCE=<file> -DCXX=<compiler> -DINCLUDES=<dir;dir;...>
cmake_minimum_required(VERSION 3.25)
file(STRINGS "${SOURCE}" expect_line REGEX "^// expect: ")
string(REGEX REPLACE "^// expect: " "" expect "${expect_line}")
set(flags -std=gnu++20 -fsyntax-only -x c++ -DTESSEL_BACKEND_SIM=1 -DTESSEL_SEPARATE_RUNTIME=1)  # as tessel::sim compiles a file
foreach(dir IN LISTS INCLUDES)
  if(dir)
    list(APPEND flags -isystem ${dir})
  endif()
endforeach()
execute_process(COMMAND ${CXX} ${flags} ${SOURCE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(expect STREQUAL "(compiles)")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${SOURCE} should compile but did not:\n${out}")
  endif()
elseif(rc EQUAL 0)
  message(FATAL_ERROR "${SOURCE} compiled, but must fail with: ${expect}")
else()
  string(FIND "${out}" "${expect}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${SOURCE} failed to compile, but not with \"${expect}\":\n${out}")
  endif()
endif()
message(STATUS "${SOURCE}: ${expect}")
