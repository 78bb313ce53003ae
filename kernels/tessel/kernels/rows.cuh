// Row-wise normalisation: softmax, log_softmax, layer_norm, rms_norm and anything else of the form
//   stats = combine over the row of accumulate(x);  out[c] = apply(finish(stats), x[c], c)
// over contiguous rows, read once where the row fits on chip:
//   rows_per_warp   rows of at most 1024: a warp per row, the row in registers;
//   rows_per_block  longer rows: a block per row; with Cached the row is kept in dynamic shared memory
//                   (up to the device's opt-in limit, 227 KiB on Hopper) and read from global memory
//                   once; without, it is read twice (statistics, then output).
// V > 1 moves V elements per 16-byte load and store (the host checks that rows are aligned and a
// multiple of V long). Statistics combine in an order fixed by the shape and the block size.
#pragma once

#include <cstdint>

#include <tessel/kernels/reduce.cuh>

namespace tessel::kernels {

// Every lane of a warp gets lane 0's value of any trivially copyable type.
template <class A>
__device__ A warp_broadcast(const A& a) {
    constexpr int words = int((sizeof(A) + 3) / 4);
    unsigned w[words] = {};
    std::memcpy(w, &a, sizeof(A));
    for (int i = 0; i < words; ++i) w[i] = __shfl_sync(0xffffffffu, w[i], 0);
    A r;
    std::memcpy(&r, w, sizeof(A));
    return r;
}

// Combines one value per thread across the block (blockDim.x a multiple of 32, at most 1024) and
// gives every thread the result. `across_warps` holds 32 values; it is free again on return.
template <class Op, class S>
__device__ S block_combine(const Op& op, S s, S* across_warps) {
    const int t = int(threadIdx.x), warps = int(blockDim.x) / 32;
    s = warp_combine(op, s, 32);
    if (t % 32 == 0) across_warps[t / 32] = s;
    __syncthreads();
    if (t < 32) {
        S w = t < warps ? across_warps[t] : op.identity();
        w = warp_combine(op, w, 32);
        if (t == 0) across_warps[0] = w;
    }
    __syncthreads();
    const S all = across_warps[0];
    __syncthreads();  // across_warps may be written again by the caller's next combine
    return all;
}

// A warp per row (8 rows per 256-thread block); each lane keeps PerLane values (PerLane / V vectors).
template <int PerLane, int V, class Op, class T, class I>
__global__ void rows_per_warp(const T* __restrict__ in, T* __restrict__ out, I rows, I cols, Op op) {
    static_assert(PerLane % V == 0, "a lane holds whole vectors");
    using S = typename Op::stats_t;
    using C = typename Op::compute_t;
    using P = ops::Packed<T, V>;
    constexpr int vectors = PerLane / V;
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    for (I base = I(blockIdx.x) * 8; base < rows; base += I(gridDim.x) * 8) {
        const I row = base + I(warp);
        if (row >= rows) continue;  // whole warps only: the shuffles below stay uniform
        const T* x = in + std::int64_t(row) * cols;
        C v[PerLane];
        S s = op.identity();
#pragma unroll
        for (int k = 0; k < vectors; ++k) {
            const I c = (I(lane) + I(k) * 32) * V;
            if (c < cols) {  // with V > 1, cols is a multiple of V: the whole vector is in the row
                const P p = *reinterpret_cast<const P*>(x + c);
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    v[k * V + j] = ops::cast<C>(p.v[j]);
                    s = op.accumulate(s, v[k * V + j]);
                }
            }
        }
        s = warp_broadcast(warp_combine(op, s, 32));
        const auto f = op.finish(s, cols);
        T* y = out + std::int64_t(row) * cols;
#pragma unroll
        for (int k = 0; k < vectors; ++k) {
            const I c = (I(lane) + I(k) * 32) * V;
            if (c < cols) {
                P p;
#pragma unroll
                for (int j = 0; j < V; ++j) p.v[j] = ops::cast<T>(op.apply(f, v[k * V + j], std::int64_t(c) + j));
                *reinterpret_cast<P*>(y + c) = p;
            }
        }
    }
}

// A block per row (any multiple of 32 threads up to 1024). With Cached, the launch gives cols * sizeof(T)
// bytes of dynamic shared memory; each thread reads back only the vectors it stored itself, so the
// cache needs no barrier of its own.
template <int V, bool Cached, class Op, class T, class I>
__global__ void rows_per_block(const T* __restrict__ in, T* __restrict__ out, I rows, I cols, Op op) {
    using S = typename Op::stats_t;
    using C = typename Op::compute_t;
    using P = ops::Packed<T, V>;
    constexpr int unroll = 4;  // loads in flight per thread before their values are used
    __shared__ S across_warps[32];
    TESSEL_DYNAMIC_SHARED(P, cache);
    const I t = I(threadIdx.x), threads = I(blockDim.x), n = cols / I(V);
    for (I row = blockIdx.x; row < rows; row += gridDim.x) {
        const P* x = reinterpret_cast<const P*>(in + std::int64_t(row) * cols);
        S s = op.identity();
        I i = t;
        for (; i + (unroll - 1) * threads < n; i += unroll * threads) {
            P p[unroll];
#pragma unroll
            for (int u = 0; u < unroll; ++u) p[u] = x[i + I(u) * threads];
#pragma unroll
            for (int u = 0; u < unroll; ++u) {
                if constexpr (Cached) cache[i + I(u) * threads] = p[u];
#pragma unroll
                for (int j = 0; j < V; ++j) s = op.accumulate(s, ops::cast<C>(p[u].v[j]));
            }
        }
        for (; i < n; i += threads) {
            const P p = x[i];
            if constexpr (Cached) cache[i] = p;
#pragma unroll
            for (int j = 0; j < V; ++j) s = op.accumulate(s, ops::cast<C>(p.v[j]));
        }
        const auto f = op.finish(block_combine(op, s, across_warps), cols);
        P* y = reinterpret_cast<P*>(out + std::int64_t(row) * cols);
        for (i = t; i < n; i += threads) {
            P p;
            if constexpr (Cached) p = cache[i];
            else p = x[i];
            P q;
#pragma unroll
            for (int j = 0; j < V; ++j) q.v[j] = ops::cast<T>(op.apply(f, ops::cast<C>(p.v[j]), std::int64_t(i) * V + j));
            y[i] = q;
        }
    }
}

}  // namespace tessel::kernels
