// tessel's runtime for the CUDA backend, compiled once per program (core/linkage.hpp): the device
// copy and fill kernels behind Tensor::contiguous(), copy_() and full(), and the allocators. The CMake
// target tessel::cuda links it as a static library and defines TESSEL_SEPARATE_RUNTIME, so that
// other files do not compile them again. Without CMake:
// compile it into the program once with nvcc, and every file (this one too) with
// -DTESSEL_BACKEND_CUDA=1 -DTESSEL_SEPARATE_RUNTIME=1; or define neither and keep tessel header-only.
#define TESSEL_RUNTIME_SOURCE 1

#include <tessel/ops/copy.hpp>  // registers the device gather, scatter and fill kernels
