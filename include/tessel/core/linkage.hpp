// Where tessel's non-template runtime code is compiled. Header-only by default: every function is
// inline and each translation unit that calls one compiles it. With TESSEL_SEPARATE_RUNTIME (which
// the CMake targets tessel::sim and tessel::cuda define) the headers only declare that code, and
// one source per program defines it: tessel/sim/runtime.cpp (the simulated CUDA runtime, its block
// executors and worker pool, the allocators, and the device copy and fill kernels) or
// tessel/cuda/runtime.cu (the allocators and the device copy and fill kernels). The targets link
// that source as a static library of the consuming project (cmake/tesselTargets.cmake). Compiled
// once instead of in every file; docs/compile-time.md has the figures.
#pragma once

#if defined(TESSEL_SEPARATE_RUNTIME)
#define TESSEL_API
#if defined(TESSEL_RUNTIME_SOURCE)
#define TESSEL_DEFINE_RUNTIME 1
#else
#define TESSEL_DEFINE_RUNTIME 0
#endif
#else
#define TESSEL_API inline
#define TESSEL_DEFINE_RUNTIME 1
#endif
