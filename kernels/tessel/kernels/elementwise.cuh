// Element-wise map over flat arrays: out[i] = f(in0[i], in1[i], ...), grid-stride, any functor.
// A functor that composes several operations is a fused expression: one pass over memory.
#pragma once

#include <cstddef>

#include <tessel/core/kernel.hpp>

namespace tessel::kernels {

template <class F, class Out, class... In>
__global__ void map(std::size_t n, F f, Out* __restrict__ out, const In*... in) {
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = f(in[i]...);
}

}  // namespace tessel::kernels
