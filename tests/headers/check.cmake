# Compiles every public header alone (an empty translation unit that includes only it), so no header
# leans on what another included first. Run by ctest as `headers.self-contained`:
#   sim:  each header as C++ with the sim backend;
#   cuda: each header in a host-compiled .cpp, where it must either compile or stop with tessel's
#         "must be compiled as CUDA" message (headers that launch kernels); and in a .cu through
#         nvcc (-cuda: its host and device front ends) when it needs nvcc or its own text has
#         device-side code or branches (__device__, __CUDA_ARCH__, ...). A header that compiles
#         alone as host C++ and has no such text reads the same to nvcc, and an error nvcc alone
#         would find in it fails the cuda preset's build (every header reaches a test nvcc compiles).
# The sim's own headers (tessel/sim/) are the sim backend: the CUDA build never includes them.
# Inputs: -DSOURCE_DIR -DWORK_DIR -DBACKEND -DCXX -DCUDA_COMPILER -DCUDA_INCLUDE -DCUDA_ARCH, and
# -DGROUP=<dir under include/tessel> to check one directory (ctest runs the groups in parallel),
# -DPART/-DPARTS to check a share of it.
cmake_minimum_required(VERSION 3.25)
if(GROUP STREQUAL "top")
  file(GLOB headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/tessel/*.hpp")
elseif(GROUP)
  file(GLOB_RECURSE headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/tessel/${GROUP}/*.hpp")
else()
  file(GLOB_RECURSE headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/tessel/*.hpp")
endif()
if(BACKEND STREQUAL "cuda")
  list(FILTER headers EXCLUDE REGEX "^tessel/sim/")
endif()
list(SORT headers)
# -DPART=k -DPARTS=n: every n-th header from the k-th (1-based), so ctest runs a large group's
# parts side by side.
if(PARTS)
  set(part_headers "")
  list(LENGTH headers count)
  set(i 0)
  foreach(h IN LISTS headers)
    math(EXPR slot "${i} % ${PARTS} + 1")
    if(slot EQUAL PART)
      list(APPEND part_headers "${h}")
    endif()
    math(EXPR i "${i} + 1")
  endforeach()
  set(headers "${part_headers}")
endif()
file(MAKE_DIRECTORY "${WORK_DIR}")
# -isystem, as find_package(tessel) gives them to users: this checks that each header stands alone,
# not the warning settings of the project's own sources (those build with -Werror).
set(includes -isystem ${SOURCE_DIR}/include -isystem ${SOURCE_DIR}/kernels -isystem ${CUDA_INCLUDE})
set(failed 0)
set(host_only 0)
set(needs_cuda 0)
set(by_nvcc 0)
foreach(h IN LISTS headers)
  string(MAKE_C_IDENTIFIER "${h}" id)
  if(BACKEND STREQUAL "sim")
    file(WRITE "${WORK_DIR}/${id}.cpp" "#include <${h}>\n#include <${h}>  // twice: the include guard holds\nint main() { return 0; }\n")
    execute_process(COMMAND ${CXX} -std=c++20 -DTESSEL_BACKEND_SIM=1 ${includes} -Wall -Wextra -Werror -fsyntax-only
                            "${WORK_DIR}/${id}.cpp"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(NOT rc EQUAL 0)
      message("FAILED (sim) ${h}:\n${out}")
      math(EXPR failed "${failed} + 1")
    endif()
  else()
    # The host compiler first; nvcc (about 10 s a header) only where it can differ (see the top).
    # The compile-as-CUDA message is an #error, so the preprocessor alone finds it (0.4 s instead
    # of the 4 s of a full host compile of ops/reduce.hpp, which would stop at the same message).
    file(WRITE "${WORK_DIR}/${id}.cpp" "#include <${h}>\nint main() { return 0; }\n")
    execute_process(COMMAND ${CXX} -std=c++20 -DTESSEL_BACKEND_CUDA=1 ${includes} -E -o /dev/null "${WORK_DIR}/${id}.cpp"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(rc EQUAL 0)
      execute_process(COMMAND ${CXX} -std=c++20 -DTESSEL_BACKEND_CUDA=1 ${includes} -Wall -Wextra -Werror -fsyntax-only
                              "${WORK_DIR}/${id}.cpp"
                      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    endif()
    file(READ "${SOURCE_DIR}/include/${h}" text)
    set(use_nvcc FALSE)
    if(text MATCHES "__CUDACC__|__CUDA_ARCH__|__device__|__host__|__global__|TESSEL_KERNEL_COMPILER_CUDA")
      set(use_nvcc TRUE)
    endif()
    if(rc EQUAL 0)
      math(EXPR host_only "${host_only} + 1")
    elseif(out MATCHES "must be compiled as CUDA")
      math(EXPR needs_cuda "${needs_cuda} + 1")
      set(use_nvcc TRUE)
    else()
      message("FAILED (host .cpp of the CUDA build) ${h}: neither compiles nor says it needs nvcc:\n${out}")
      math(EXPR failed "${failed} + 1")
    endif()
    if(use_nvcc)
      math(EXPR by_nvcc "${by_nvcc} + 1")
      file(WRITE "${WORK_DIR}/${id}.cu" "#include <${h}>\n#include <${h}>\nint main() { return 0; }\n")
      execute_process(COMMAND ${CUDA_COMPILER} -std=c++20 -arch=${CUDA_ARCH} -DTESSEL_BACKEND_CUDA=1 ${includes}
                              -Werror=all-warnings -cuda "${WORK_DIR}/${id}.cu" -o "${WORK_DIR}/${id}.cu.ii"
                      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
      if(NOT rc EQUAL 0)
        message("FAILED (nvcc .cu) ${h}:\n${out}")
        math(EXPR failed "${failed} + 1")
      endif()
    endif()
  endif()
endforeach()
list(LENGTH headers n)
if(BACKEND STREQUAL "sim")
  message("headers: ${n} compiled alone for the sim, ${failed} failed")
else()
  message("headers: ${n} checked; in host .cpp files ${host_only} compile and ${needs_cuda} stop with the "
          "compile-as-CUDA message; ${by_nvcc} compiled alone by nvcc (those and the ones with device-side code); "
          "${failed} failed")
endif()
if(failed GREATER 0)
  message(FATAL_ERROR "${failed} header check(s) failed")
endif()
