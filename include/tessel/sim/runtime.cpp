// tessel's runtime for the sim backend, compiled once per program (core/linkage.hpp): the simulated
// CUDA runtime with its block executors and worker pool, the allocators, and the device copy and
// fill kernels. The CMake target tessel::sim links it as a static library and defines
// TESSEL_SEPARATE_RUNTIME, so that other files only declare what it defines. Without CMake:
// compile it into the program once, and every file (this one too) with -DTESSEL_BACKEND_SIM=1
// -DTESSEL_SEPARATE_RUNTIME=1; or define neither and keep tessel header-only.
#define TESSEL_RUNTIME_SOURCE 1

#include <tessel/ops/copy.hpp>  // registers the device gather, scatter and fill kernels
#include <tessel/sim/cublas.hpp>  // the cuBLAS stand-in
#include <tessel/sim/cublaslt.hpp>  // the cuBLASLt stand-in
#include <tessel/sim/nccl.hpp>  // the NCCL stand-in
#include <tessel/sim/nvml.hpp>  // the NVML stand-in
#include <tessel/runtime/rt.hpp>
