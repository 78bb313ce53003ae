# Defines the two consumer-facing INTERFACE targets, in the build tree and in an install alike:
#   tessel::cuda  kernels compiled by nvcc; links the CUDA runtime, cuBLAS, cuBLASLt (+ cuDNN, NCCL when found)
#   tessel::sim   host compiler only; the same kernels run on the CPU simulation backend
# tessel_define_targets(<public include dir> <kernels include dir>); for tessel::cuda to compile its
# runtime once (not in every file), enable CUDA before calling it (before find_package(tessel)).
include_guard(GLOBAL)

function(tessel_define_targets include_dir kernels_dir)
  if(TARGET tessel::sim)
    return()
  endif()
  find_package(CUDAToolkit REQUIRED)   # headers for both backends (fp16/bf16 types, runtime types)
  find_package(Threads REQUIRED)
  find_package(Boost 1.74 QUIET CONFIG COMPONENTS context)
  find_package(dlpack QUIET CONFIG)    # optional: tessel/tensor/dlpack.hpp needs it

  add_library(tessel::headers INTERFACE IMPORTED GLOBAL)
  target_include_directories(tessel::headers INTERFACE "${include_dir}" "${kernels_dir}")
  target_compile_features(tessel::headers INTERFACE cxx_std_20)
  if(TARGET dlpack::dlpack)
    target_link_libraries(tessel::headers INTERFACE dlpack::dlpack)
  endif()

  # tessel's runtime is compiled once per build tree (tessel/core/linkage.hpp): the headers only
  # declare it (TESSEL_SEPARATE_RUNTIME), and its one source per backend becomes a static library that
  # tessel::sim / tessel::cuda link. The library is a real target of the project that finds tessel, so
  # it is compiled with that project's flags (sanitizers included) and only when something links it.
  add_library(tessel_sim_usage INTERFACE)
  target_link_libraries(tessel_sim_usage INTERFACE tessel::headers CUDA::toolkit Threads::Threads)
  target_compile_definitions(tessel_sim_usage INTERFACE TESSEL_BACKEND_SIM=1 TESSEL_SEPARATE_RUNTIME=1)
  # The sim's cuBLAS stand-in multiplies fp32 and fp64 through OpenBLAS where it is installed
  # (Debian libopenblas-dev), in plain loops otherwise.
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS QUIET)
  if(BLAS_FOUND)
    target_link_libraries(tessel_sim_usage INTERFACE ${BLAS_LIBRARIES})
    target_compile_definitions(tessel_sim_usage INTERFACE TESSEL_SIM_HAS_OPENBLAS=1)
  else()
    message(STATUS "tessel: OpenBLAS not found; the sim's cuBLAS stand-in multiplies in plain loops (install libopenblas-dev)")
  endif()
  # -rdynamic: the sim names kernels in its diagnostics through dladdr.
  target_link_options(tessel_sim_usage INTERFACE -rdynamic)
  add_library(tessel::sim INTERFACE IMPORTED GLOBAL)
  if(TARGET Boost::context)
    target_link_libraries(tessel_sim_usage INTERFACE Boost::context)
    add_library(tessel_sim_runtime STATIC EXCLUDE_FROM_ALL "${include_dir}/tessel/sim/runtime.cpp")
    set_target_properties(tessel_sim_runtime PROPERTIES POSITION_INDEPENDENT_CODE ON LINKER_LANGUAGE CXX)
    target_link_libraries(tessel_sim_runtime PUBLIC tessel_sim_usage)
    target_link_libraries(tessel::sim INTERFACE tessel_sim_runtime tessel_sim_usage)
  else()
    message(STATUS "tessel: Boost.Context not found; tessel::sim is unusable until libboost-context-dev is installed")
    set_property(TARGET tessel::sim PROPERTY INTERFACE_LINK_LIBRARIES "tessel_sim_needs_Boost_context")
  endif()

  add_library(tessel_cuda_usage INTERFACE)
  target_link_libraries(tessel_cuda_usage INTERFACE tessel::headers CUDA::cudart CUDA::cublas CUDA::cublasLt)
  target_compile_definitions(tessel_cuda_usage INTERFACE TESSEL_BACKEND_CUDA=1)
  # CMake 3.25 does not know nvcc 13's features, so C++20 for CUDA sources is asked for directly.
  target_compile_options(tessel_cuda_usage INTERFACE $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20 --expt-relaxed-constexpr>)
  add_library(tessel::cuda INTERFACE IMPORTED GLOBAL)
  target_link_libraries(tessel::cuda INTERFACE tessel_cuda_usage)
  # The CUDA runtime source needs nvcc, so the project must have enabled CUDA before it finds tessel;
  # otherwise tessel::cuda stays header-only (correct, with every file compiling the runtime again).
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if("CUDA" IN_LIST languages)
    add_library(tessel_cuda_runtime STATIC EXCLUDE_FROM_ALL "${include_dir}/tessel/cuda/runtime.cu")
    set_target_properties(tessel_cuda_runtime PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_compile_definitions(tessel_cuda_runtime PUBLIC TESSEL_SEPARATE_RUNTIME=1)
    target_link_libraries(tessel_cuda_runtime PUBLIC tessel_cuda_usage)
    target_link_libraries(tessel::cuda INTERFACE tessel_cuda_runtime)
  else()
    message(STATUS "tessel: CUDA is not enabled yet, so tessel::cuda is header-only; call enable_language(CUDA) before find_package(tessel) to compile its runtime once")
  endif()
  foreach(vendor cudnn:cudnn.h:9 nccl:nccl.h:2)
    string(REPLACE ":" ";" fields "${vendor}")
    list(GET fields 0 name)
    list(GET fields 1 header)
    list(GET fields 2 major)
    string(TOUPPER "${name}" upper)
    tessel_find_vendor_library(${name} ${header} ${major} "${CUDAToolkit_LIBRARY_DIR}" "${CUDAToolkit_INCLUDE_DIRS}")
    if(TESSEL_${upper}_LIBRARY AND TESSEL_${upper}_INCLUDE_DIR)
      target_link_libraries(tessel_cuda_usage INTERFACE "${TESSEL_${upper}_LIBRARY}")
      # The toolkit's folder is on the path already (CUDA::cudart). Another (a wheel's) as -I: nvcc
      # puts its own include folder first as -I, where a toolkit's older nccl.h would otherwise win
      # over an -isystem folder.
      get_filename_component(include_dir "${TESSEL_${upper}_INCLUDE_DIR}" REALPATH)
      set(in_toolkit FALSE)
      foreach(toolkit_dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
        get_filename_component(toolkit_dir "${toolkit_dir}" REALPATH)
        if(include_dir STREQUAL toolkit_dir)
          set(in_toolkit TRUE)
        endif()
      endforeach()
      if(NOT in_toolkit)
        target_include_directories(tessel_cuda_usage INTERFACE "${include_dir}")
      endif()
      target_compile_definitions(tessel_cuda_usage INTERFACE TESSEL_HAS_${upper}=1)
    endif()
  endforeach()
endfunction()

# cuDNN and NCCL are optional. Looked for in the CUDA toolkit and the system's folders first, then in
# the Python environment's NVIDIA wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13: PyTorch installs them,
# and on a machine set up for PyTorch they are often the only copy): <site-packages>/nvidia/<name>/
# holds lib/lib<name>.so.<major> (no unversioned link to find) and include/. The header is taken from
# beside the library where it is there (a toolkit's nccl.h with a wheel's newer libnccl would declare
# the wrong version), and the library only with its header. -DTESSEL_<NAME>_LIBRARY=... and
# -DTESSEL_<NAME>_INCLUDE_DIR=... choose others (=OFF leaves the library out), -DTESSEL_PYTHON=...
# the Python whose wheels are searched (python3 on the PATH by default). Sets those two cache
# entries and says what it found.
function(tessel_find_vendor_library name header major toolkit_lib_dir toolkit_include_dirs)
  string(TOUPPER "${name}" upper)
  set(library_var TESSEL_${upper}_LIBRARY)
  set(include_var TESSEL_${upper}_INCLUDE_DIR)
  find_library(${library_var} NAMES ${name} HINTS ${toolkit_lib_dir})
  if(NOT ${library_var} AND NOT "${${library_var}}" MATCHES "NOTFOUND$")
    message(STATUS "tessel: ${name} left out (${library_var}=${${library_var}})")
    return()
  endif()
  if(NOT ${library_var})
    # A wheel's folder, from the package's own search path (nvidia is a namespace package, so its
    # parts may lie in several site-packages folders).
    find_program(TESSEL_PYTHON NAMES python3 python)
    set(roots "")
    if(TESSEL_PYTHON)
      execute_process(COMMAND "${TESSEL_PYTHON}" -c [=[
import importlib.util, sys
try:
    spec = importlib.util.find_spec("nvidia." + sys.argv[1])
except (ImportError, ValueError):
    spec = None
print(";".join(spec.submodule_search_locations or []) if spec else "", end="")
]=] "${name}" RESULT_VARIABLE rc OUTPUT_VARIABLE roots ERROR_QUIET)
      if(NOT rc EQUAL 0)
        set(roots "")
      endif()
    endif()
    foreach(root IN LISTS roots)
      if(EXISTS "${root}/lib/lib${name}.so.${major}" AND EXISTS "${root}/include/${header}")
        set(${library_var} "${root}/lib/lib${name}.so.${major}" CACHE FILEPATH "${name}'s library" FORCE)
        break()
      endif()
    endforeach()
  endif()
  # A library changed since the last configure (given anew, or searched again after -U) takes the
  # header beside it again, unless the header's folder was changed too.
  set(pair_var _TESSEL_${upper}_PAIR)
  if(DEFINED CACHE{${pair_var}})
    list(GET ${pair_var} 0 paired_library)
    list(GET ${pair_var} 1 paired_include)
    if(NOT "${${library_var}}" STREQUAL "${paired_library}" AND "${${include_var}}" STREQUAL "${paired_include}")
      unset(${include_var} CACHE)
    endif()
  endif()
  if(${library_var})
    get_filename_component(beside "${${library_var}}/../../include" ABSOLUTE)
    find_path(${include_var} ${header} HINTS "${beside}" ${toolkit_include_dirs})
  else()
    set(${include_var} "${include_var}-NOTFOUND" CACHE PATH "the folder of ${header}")
  endif()
  set(${pair_var} "${${library_var}};${${include_var}}" CACHE INTERNAL "")
  if(${library_var} AND ${include_var})
    message(STATUS "tessel: ${name}: ${${library_var}} (${header} in ${${include_var}})")
  else()
    message(STATUS "tessel: ${name} not found (library: ${${library_var}}, ${header}: ${${include_var}}); "
                   "tessel::cuda builds without it. Install it (with the CUDA toolkit, the system's packages, or "
                   "pip install nvidia-${name}-cu13), or pass -D${library_var}=... -D${include_var}=...")
  endif()
endfunction()
