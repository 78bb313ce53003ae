// tessel: typed GPU tensors and hand-written kernels for C++20, on CUDA or on the CPU simulation.
// One include for the public API. Kernel launches (tessel::launch) come with it when this file is
// compiled as CUDA (tessel::cuda) or for the sim (tessel::sim); a host-compiled file of a CUDA
// build gets the device, memory and stream API without them.
#pragma once

#include "core/backend.hpp"
#include "core/error.hpp"
#include "runtime/device.hpp"
#include "runtime/rt.hpp"
#include "memory/allocator.hpp"  // memory::allocated(), stats(), memory_summary(), empty_cache(), ...
#include "stream/pipeline.hpp"   // overlap_pipeline over host tensors or spans
#include "tensor/tensor.hpp"     // Tensor<T>, views, copies, copy_

#if defined(TESSEL_BACKEND_SIM) || defined(__CUDACC__)
#include "runtime/launch.hpp"
#include "ops/assign.hpp"  // element-wise expressions: (c = a * b + 1).run(stream)
#include "ops/reduce.hpp"  // sum, mean, amax, argmax, var, norm, ... over any axes
#include "ops/copy.hpp"    // contiguous() of strided device views by kernel (tiled transpose)
#include "ops/rows.hpp"    // softmax, log_softmax, layer_norm, rms_norm
#include "ops/quantize.hpp" // int8 quantize / dequantize, per tensor or per channel
#include "ops/amp.hpp"      // unscale_and_check, DynamicLossScaler
#include "ops/random.hpp"   // Philox4x32-10 uniform and normal fills
// Not included here: ops/sort.hpp (sort, argsort, cumsum, cumprod, unique), which brings CUB and
// Thrust and would triple what an nvcc file including tessel.hpp costs (docs/compile-time.md);
// #include <tessel/ops/sort.hpp> where they are used.
#endif

namespace tessel {
// The library's version.
inline constexpr int version_major = 0, version_minor = 1, version_patch = 0;
}  // namespace tessel
