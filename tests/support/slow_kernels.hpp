// Kernels that keep a stream busy for a while, so tests can show that work queued elsewhere waits
// for them (or, when ordering is missing, does not).
#pragma once

#include <tessel/core/kernel.hpp>

namespace tessel::testing {

// y = x, rewritten `rounds` times: reads x for the whole run.
template <class T>
__global__ void slow_copy(const T* x, T* y, int n, int rounds) {
    for (int r = 0; r < rounds; ++r)
        for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x)) y[i] = x[i] + T(r) - T(r);
}

// x = value, rewritten `rounds` times.
template <class T>
__global__ void slow_fill(T* x, int n, T value, int rounds) {
    for (int r = 0; r < rounds; ++r)
        for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x)) x[i] = value + T(r) - T(r);
}

// x += 1, `rounds` times.
template <class T>
__global__ void slow_add_one(T* x, int n, int rounds) {
    for (int r = 0; r < rounds; ++r)
        for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x)) x[i] += T(1);
}

}  // namespace tessel::testing
