// Element-wise map over flat arrays: out[i] = f(in0[i], in1[i], ...), grid-stride, any functor.
// A functor that composes several operations is a fused expression: one pass over memory. And the
// fill behind full() and ones(): every element set to the same bits.
#pragma once

#include <cstddef>

#include <tessel/core/kernel.hpp>

namespace tessel::kernels {

// budget: threads 256, registers 32, hot
template <class F, class Out, class... In>
__global__ void map(std::size_t n, F f, Out* __restrict__ out, const In*... in) {
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = f(in[i]...);
}

// data[i] = value for i < n, where E is an unsigned integer of the element's size; V elements per
// 16-byte store (the host checks that data is 16-byte aligned when V > 1), the tail one by one.
// budget: threads 256, registers 32, hot
template <int V, class E>
__global__ void fill(E* __restrict__ data, std::size_t n, E value) {
    struct alignas(sizeof(E) * V) Vector {
        E v[V];
    };
    Vector pattern;
    for (int k = 0; k < V; ++k) pattern.v[k] = value;
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x, first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t vectors = n / V;
    for (std::size_t i = first; i < vectors; i += stride) reinterpret_cast<Vector*>(data)[i] = pattern;
    for (std::size_t i = vectors * V + first; i < n; i += stride) data[i] = value;
}

}  // namespace tessel::kernels
