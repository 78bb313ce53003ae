// What a kernel source in kernels/ includes: the CUDA kernel language, from nvcc (tessel::cuda) or
// from the sim's compatibility header (tessel::sim). Kernels use plain CUDA C++ plus the one macro
// below for dynamic shared memory, and cooperative_groups::this_cluster() for thread-block clusters.
#pragma once

#include "backend.hpp"

#if defined(TESSEL_BACKEND_SIM)
#include "../sim/kernel_api.hpp"
#else
#if !defined(__CUDACC__)
#error "tessel::cuda: this file uses tessel kernels or tessel::launch, so it must be compiled as CUDA: give it a .cu extension or set_source_files_properties(<file> PROPERTIES LANGUAGE CUDA)"
#endif
#include <cooperative_groups.h>  // cluster_group (sm_90 thread-block clusters); the sim has its own
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
// Dynamic shared memory: TESSEL_DYNAMIC_SHARED(float, tile) declares `float* tile`.
#define TESSEL_DYNAMIC_SHARED(type, name)                                    \
    extern __shared__ __align__(16) unsigned char tessel_dynamic_smem_[]; \
    type* name = reinterpret_cast<type*>(tessel_dynamic_smem_)
#endif
