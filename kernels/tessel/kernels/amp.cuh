// Mixed-precision training helpers. unscale_and_check multiplies every element of a list of tensors
// by inv_scale in place and raises *found_nonfinite if any element (before scaling) is inf or NaN:
// one launch for up to MaxTensors tensors, blocks walking fixed-size chunks of all of them.
#pragma once

#include <cstdint>

#include <tessel/core/kernel.hpp>
#include <tessel/ops/promote.hpp>

namespace tessel::kernels {

// The tensors of one launch: their first elements, lengths, and the first chunk of each (prefix sums).
template <class T, int MaxTensors>
struct TensorList {
    int count;
    T* data[MaxTensors];
    std::int64_t numel[MaxTensors];
    std::int64_t first_chunk[MaxTensors + 1];
};

// budget: threads 256, registers 32, hot
template <class T, int MaxTensors, int Chunk>
__global__ void unscale_and_check(TensorList<T, MaxTensors> list, float inv_scale, unsigned* found_nonfinite) {
    const std::int64_t chunks = list.first_chunk[list.count];
    bool bad = false;
    for (std::int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        int t = 0;
        while (list.first_chunk[t + 1] <= c) ++t;
        const std::int64_t begin = (c - list.first_chunk[t]) * Chunk;
        const std::int64_t end = begin + Chunk < list.numel[t] ? begin + Chunk : list.numel[t];
        T* p = list.data[t];
        for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
            const float v = ops::cast<float>(p[i]);
            bad |= !(v - v == 0.0f);  // inf - inf and NaN - NaN are NaN
            p[i] = ops::cast<T>(v * inv_scale);
        }
    }
    if (bad) atomicOr(found_nonfinite, 1u);
}

}  // namespace tessel::kernels
