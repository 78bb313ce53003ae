// Which backend this translation unit targets. The CMake target chooses it (tessel::cuda defines
// TESSEL_BACKEND_CUDA, tessel::sim defines TESSEL_BACKEND_SIM), never the compiler that happens to run.
#pragma once

#if defined(TESSEL_BACKEND_CUDA) && defined(TESSEL_BACKEND_SIM)
#error "tessel: both TESSEL_BACKEND_CUDA and TESSEL_BACKEND_SIM are defined; link exactly one of tessel::cuda or tessel::sim"
#endif
#if !defined(TESSEL_BACKEND_CUDA) && !defined(TESSEL_BACKEND_SIM)
#error "tessel: no backend selected; link the CMake target tessel::cuda (GPU) or tessel::sim (CPU simulation)"
#endif

// Kernel-side code compiled by nvcc for the device, or by the host compiler in the sim.
#if defined(TESSEL_BACKEND_CUDA) && defined(__CUDACC__)
#define TESSEL_KERNEL_COMPILER_CUDA 1
#endif

// `#pragma unroll` for a __host__ __device__ function: nvcc's device compile unrolls, and the host
// compiler, which does not know the pragma (g++ warns under -Wall), is given nothing.
#if defined(__CUDA_ARCH__)
#define TESSEL_PRAGMA_UNROLL _Pragma("unroll")
#else
#define TESSEL_PRAGMA_UNROLL
#endif

namespace tessel {
// The backend this build runs on.
enum class Backend { cuda, sim };
#if defined(TESSEL_BACKEND_CUDA)
inline constexpr Backend backend = Backend::cuda;
inline constexpr const char* backend_name = "cuda";
#else
inline constexpr Backend backend = Backend::sim;
inline constexpr const char* backend_name = "sim";
#endif
}  // namespace tessel
