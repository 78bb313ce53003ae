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
  find_library(TESSEL_CUDNN_LIBRARY cudnn HINTS "${CUDAToolkit_LIBRARY_DIR}")
  find_library(TESSEL_NCCL_LIBRARY nccl HINTS "${CUDAToolkit_LIBRARY_DIR}")
  if(TESSEL_CUDNN_LIBRARY)
    target_link_libraries(tessel_cuda_usage INTERFACE "${TESSEL_CUDNN_LIBRARY}")
    target_compile_definitions(tessel_cuda_usage INTERFACE TESSEL_HAS_CUDNN=1)
  endif()
  if(TESSEL_NCCL_LIBRARY)
    target_link_libraries(tessel_cuda_usage INTERFACE "${TESSEL_NCCL_LIBRARY}")
    target_compile_definitions(tessel_cuda_usage INTERFACE TESSEL_HAS_NCCL=1)
  endif()
endfunction()
