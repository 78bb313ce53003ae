// Row-wise normalisation: softmax, log_softmax, layer_norm, rms_norm and anything else of the form
//   stats = combine over the row of accumulate(x);  out[c] = apply(finish(stats), x[c], c)
// over contiguous rows. A warp per row keeps the row in registers (up to 32 values per lane, so rows
// of at most 1024) and reads it once; a 256-thread block per row handles longer rows in two passes
// (statistics, then output; the second pass mostly hits L2). Statistics combine in a fixed order.
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

// A warp per row (8 rows per 256-thread block); each lane caches up to PerLane values.
template <int PerLane, class Op, class T, class Out, class I>
__global__ void rows_per_warp(const T* __restrict__ in, Out* __restrict__ out, I rows, I cols, Op op) {
    using S = typename Op::stats_t;
    using C = typename Op::compute_t;
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    for (I base = I(blockIdx.x) * 8; base < rows; base += I(gridDim.x) * 8) {
        const I row = base + I(warp);
        if (row >= rows) continue;  // whole warps only: the shuffles below stay uniform
        const T* x = in + std::int64_t(row) * cols;
        C v[PerLane];
        S s = op.identity();
        for (int k = 0; k < PerLane; ++k) {
            const I c = I(lane) + I(k) * 32;
            v[k] = C(0);
            if (c < cols) {
                v[k] = ops::cast<C>(x[c]);
                s = op.accumulate(s, v[k]);
            }
        }
        s = warp_broadcast(warp_combine(op, s, 32));
        const auto f = op.finish(s, cols);
        Out* y = out + std::int64_t(row) * cols;
        for (int k = 0; k < PerLane; ++k) {
            const I c = I(lane) + I(k) * 32;
            if (c < cols) y[c] = ops::cast<Out>(op.apply(f, v[k], std::int64_t(c)));
        }
    }
}

// A 256-thread block per row, two passes over global memory.
template <class Op, class T, class Out, class I>
__global__ void rows_per_block(const T* __restrict__ in, Out* __restrict__ out, I rows, I cols, Op op) {
    using S = typename Op::stats_t;
    using C = typename Op::compute_t;
    __shared__ S across_warps[8];
    const int t = int(threadIdx.x);
    for (I row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* x = in + std::int64_t(row) * cols;
        S s = op.identity();
        for (I c = I(t); c < cols; c += 256) s = op.accumulate(s, ops::cast<C>(x[c]));
        s = warp_combine(op, s, 32);
        if (t % 32 == 0) across_warps[t / 32] = s;
        __syncthreads();
        if (t < 32) {
            S w = t < 8 ? across_warps[t] : op.identity();
            w = warp_combine(op, w, 8);
            if (t == 0) across_warps[0] = w;
        }
        __syncthreads();
        const auto f = op.finish(across_warps[0], cols);
        Out* y = out + std::int64_t(row) * cols;
        for (I c = I(t); c < cols; c += 256) y[c] = ops::cast<Out>(op.apply(f, ops::cast<C>(x[c]), std::int64_t(c)));
        __syncthreads();  // across_warps is reused by the next row
    }
}

}  // namespace tessel::kernels
