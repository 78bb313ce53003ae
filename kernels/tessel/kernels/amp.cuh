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

// One element: scaled in place in its compute type (double stays double, as torch's unscale), and
// `bad` raised if it was inf or NaN (inf - inf and NaN - NaN are NaN).
template <class T>
__device__ void unscale_one(T& x, float inv_scale, bool& bad) {
    using C = ops::compute_t<T>;
    const C v = ops::cast<C>(x);
    bad |= !(v - v == C(0));
    x = ops::cast<T>(v * C(inv_scale));
}

// A chunk is read in 16-byte vectors (when its tensor is 16-byte aligned; a chunk starts at a
// multiple of Chunk elements, so then every vector is aligned), Unroll of them in flight per thread
// before any is used, the tail (numel % V) element by element.
// budget: threads 256, registers 40, hot, wide
template <class T, int MaxTensors, int Chunk>
__global__ void unscale_and_check(TensorList<T, MaxTensors> list, float inv_scale, unsigned* found_nonfinite) {
    constexpr int V = int(16 / sizeof(T)) > 1 ? int(16 / sizeof(T)) : 1, Unroll = 4;
    static_assert(Chunk % V == 0, "a chunk is whole vectors");
    struct alignas(16) Vector {
        T v[V];
    };
    const std::int64_t chunks = list.first_chunk[list.count];
    const std::int64_t threads = blockDim.x;
    bool bad = false;
    for (std::int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
        int t = 0;
        while (list.first_chunk[t + 1] <= c) ++t;
        const std::int64_t begin = (c - list.first_chunk[t]) * Chunk;
        const std::int64_t end = begin + Chunk < list.numel[t] ? begin + Chunk : list.numel[t];
        T* p = list.data[t];
        std::int64_t i = begin + threadIdx.x;
        if (reinterpret_cast<std::uintptr_t>(p) % 16 == 0) {
            Vector* q = reinterpret_cast<Vector*>(p);
            const std::int64_t vend = end / V;
            std::int64_t k = begin / V + threadIdx.x;
            for (; k + (Unroll - 1) * threads < vend; k += Unroll * threads) {
                Vector x[Unroll];
#pragma unroll
                for (int u = 0; u < Unroll; ++u) x[u] = q[k + u * threads];
#pragma unroll
                for (int u = 0; u < Unroll; ++u) {
#pragma unroll
                    for (int j = 0; j < V; ++j) unscale_one(x[u].v[j], inv_scale, bad);
                    q[k + u * threads] = x[u];
                }
            }
            for (; k < vend; k += threads) {
                Vector x = q[k];
#pragma unroll
                for (int j = 0; j < V; ++j) unscale_one(x.v[j], inv_scale, bad);
                q[k] = x;
            }
            i = vend * V + threadIdx.x;
        }
        for (; i < end; i += threads) unscale_one(p[i], inv_scale, bad);
    }
    if (bad) atomicOr(found_nonfinite, 1u);
}

}  // namespace tessel::kernels
