// CUDA's qualifiers for the host compiler, defined before any CUDA header: host_defines.h keeps an
// existing definition when nvcc is not compiling, so these win over its attribute spellings.
#pragma once

// Under ThreadSanitizer a block's threads run as OS threads (TSan cannot follow fiber switches).
#if !defined(TESSEL_SIM_OS_THREADS) && (defined(__SANITIZE_THREAD__) || defined(TESSEL_SANITIZE_THREAD))
#define TESSEL_SIM_OS_THREADS 1
#endif

#if !defined(__CUDACC__)
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#if defined(TESSEL_SIM_OS_THREADS)
#define __shared__ static  // blocks run one at a time; the block's OS threads share it
#else
#define __shared__ static thread_local  // one copy per worker thread = per running block
#endif
#endif

