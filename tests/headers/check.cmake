# Compiles every public header alone (an empty translation unit that includes only it), so no header
# leans on what another included first. Run by ctest as `headers.self-contained`:
#   sim:  each header as C++ with the sim backend;
#   cuda: each header in a host-compiled .cpp, where it must either compile or stop with tessel's
#         "must be compiled as CUDA" message (headers that launch kernels); and in a .cu through
#         nvcc (-cuda: its host and device front ends) when it needs nvcc or its own text has
#         device-side code or branches (__device__, __CUDA_ARCH__, ...). A header that compiles
#         alone as host C++ and has no such text reads the same to nvcc, and an error nvcc alone
#         would find in it fails the cuda preset's build (every header reaches a test nvcc compiles).
# Each in the separate-runtime mode CMake's targets use, and header-only as well where the header
# defines or declares runtime code (see the loop).
# The sim's own headers (tessel/sim/) are the sim backend: the CUDA build never includes them.
# Inputs: -DSOURCE_DIR -DWORK_DIR -DBACKEND -DCXX -DCUDA_COMPILER -DCUDA_INCLUDE -DCUDA_ARCH, and
# -DGROUP=<dir under include/tessel> to check one directory (ctest runs the groups in parallel),
# -DPART/-DPARTS to check a share of it.
cmake_minimum_required(VERSION 3.25)
string(TOUPPER "${BACKEND}" BACKEND_MACRO)
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
set(checks 0)
set(host_only 0)
set(needs_cuda 0)
set(by_nvcc 0)
foreach(h IN LISTS headers)
  string(MAKE_C_IDENTIFIER "${h}" id)
  file(READ "${SOURCE_DIR}/include/${h}" text)
  # Each header as CMake's users compile it (tessel::sim and tessel::cuda define
  # TESSEL_SEPARATE_RUNTIME: the runtime's definitions are compiled once, in its own source), and
  # header-only (without it) where its own text holds some of those definitions (#if
  # TESSEL_DEFINE_RUNTIME) or declarations that become inline ones (TESSEL_API), whose includes
  # must stand alone too; and memory/device_allocator.hpp, which allocator.hpp's definition block
  # reaches (through caching_allocator.hpp) while device_allocator.hpp itself is half-read, an
  # order only its own header-only check sees. Other headers read the same in both modes but for
  # the definitions of the headers they include, which those headers' checks cover; compiling them
  # again in every check cost 7 of tessel.hpp's 10 s.
  set(modes separate)
  if(text MATCHES "TESSEL_DEFINE_RUNTIME|TESSEL_API" OR h STREQUAL "tessel/memory/device_allocator.hpp")
    list(APPEND modes header-only)
  endif()
  foreach(mode IN LISTS modes)
    math(EXPR checks "${checks} + 1")
    set(defines -DTESSEL_BACKEND_${BACKEND_MACRO}=1)
    set(file "${WORK_DIR}/${id}")
    if(mode STREQUAL "separate")
      list(APPEND defines -DTESSEL_SEPARATE_RUNTIME=1)
    else()
      string(APPEND file "-header-only")
    endif()
    if(BACKEND STREQUAL "sim")
      file(WRITE "${file}.cpp" "#include <${h}>\n#include <${h}>  // twice: the include guard holds\nint main() { return 0; }\n")
      execute_process(COMMAND ${CXX} -std=c++20 ${defines} ${includes} -Wall -Wextra -Werror -fsyntax-only "${file}.cpp"
                      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
      if(NOT rc EQUAL 0)
        message("FAILED (sim, ${mode}) ${h}:\n${out}")
        math(EXPR failed "${failed} + 1")
      endif()
      continue()
    endif()
    # The host compiler first; nvcc (about 10 s a header) only where it can differ (see the top).
    # -Wfatal-errors: the compile-as-CUDA message is an #error, and the compile stops there (0.1 s
    # instead of the 3.7 s g++ spent on ops/reduce.hpp after it); a failing header shows its first error.
    file(WRITE "${file}.cpp" "#include <${h}>\nint main() { return 0; }\n")
    execute_process(COMMAND ${CXX} -std=c++20 ${defines} ${includes} -Wall -Wextra -Werror -Wfatal-errors -fsyntax-only "${file}.cpp"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
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
      message("FAILED (host .cpp of the CUDA build, ${mode}) ${h}: neither compiles nor says it needs nvcc:\n${out}")
      math(EXPR failed "${failed} + 1")
    endif()
    if(use_nvcc)
      math(EXPR by_nvcc "${by_nvcc} + 1")
      file(WRITE "${file}.cu" "#include <${h}>\n#include <${h}>\nint main() { return 0; }\n")
      execute_process(COMMAND ${CUDA_COMPILER} -std=c++20 -arch=${CUDA_ARCH} ${defines} ${includes}
                              -Werror=all-warnings -cuda "${file}.cu" -o "${file}.cu.ii"
                      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
      if(NOT rc EQUAL 0)
        message("FAILED (nvcc .cu, ${mode}) ${h}:\n${out}")
        math(EXPR failed "${failed} + 1")
      endif()
    endif()
  endforeach()
endforeach()
list(LENGTH headers n)
set(counted "headers: ${n} in ${checks} checks (separate runtime, and header-only where a header defines or declares runtime code)")
if(BACKEND STREQUAL "sim")
  message("${counted} compiled alone for the sim, ${failed} failed")
else()
  message("${counted}; in host .cpp files ${host_only} compile and ${needs_cuda} stop with the compile-as-CUDA message; ${by_nvcc} "
          "compiled alone by nvcc (those and the ones with device-side code); ${failed} failed")
endif()
if(failed GREATER 0)
  message(FATAL_ERROR "${failed} header check(s) failed")
endif()
