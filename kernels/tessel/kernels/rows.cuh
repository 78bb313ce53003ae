// Row-wise normalisation: softmax, log_softmax, layer_norm, rms_norm and anything else of the form
//   stats = combine over the row of accumulate(x);  out[c] = apply(finish(stats), x[c], c)
// over contiguous rows, read once where the row fits on chip:
//   rows_per_warp   rows of at most 1024: a warp per row, the row in registers;
//   rows_per_block  longer rows: a block per row; with Cached the row is kept in dynamic shared memory
//                   (up to the device's opt-in limit, 227 KiB on Hopper) and read from global memory
//                   once; without, it is read twice (statistics, then output);
//   rows_per_cluster  rows up to 8 blocks' shared memory (sm_90 clusters): each block of the cluster
//                   keeps a slice, statistics meet through distributed shared memory, read once.
// V > 1 moves V elements per 16-byte load and store (the host checks that rows are aligned and a
// multiple of V long). Statistics combine in an order fixed by the shape and alignment (which
// choose V and the block size), never by timing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

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

// Every lane of a warp gets f over all 32 lanes' values, by an xor butterfly: at each step a lane
// and its partner compute f(a, b) and f(b, a), the same for commutative f (+, max), so all agree.
template <class F, class C>
__device__ C warp_all(F f, C x) {
    for (int d = 16; d >= 1; d /= 2) {
        unsigned w[(sizeof(C) + 3) / 4];
        std::memcpy(w, &x, sizeof(C));
        for (auto& word : w) word = __shfl_xor_sync(0xffffffffu, word, d);
        C y;
        std::memcpy(&y, w, sizeof(C));
        x = f(x, y);
    }
    return x;
}

// Blocks per SM the warp path asks the compiler to fit (__launch_bounds__). A lane's PerLane values
// take PerLane * sizeof(C) / 4 registers, and an op that reads per-column parameters (layer_norm's
// weight and bias: Op::column_parameters) has their loads in flight too: 32 floats with no or one
// parameter fit under 80 registers (3 blocks of 256 threads), 8 under 64 (4 blocks), 32 doubles or
// 32 floats with two parameters under 128 (2 blocks).
template <class Op>
inline constexpr int column_parameters = [] {
    if constexpr (requires { Op::column_parameters; }) return Op::column_parameters;
    else return 0;
}();
template <int PerLane, class Op>
inline constexpr int rows_per_warp_min_blocks = [] {
    const int bytes = PerLane * int(sizeof(typename Op::compute_t)) * (column_parameters<Op> > 1 ? 2 : 1);
    return bytes <= 32 ? 4 : bytes <= 128 ? 3 : 2;
}();

// A warp per row (8 rows per 256-thread block); each lane keeps PerLane values (PerLane / V vectors).
// Every load of the row is issued before any value is used (the lane's vectors sit at immediate
// offsets from one address), then the statistics are taken from registers: ops that define
// `shifted_exp` (softmax) reduce the maximum first and compute exp(x - max) once per element,
// reused by the output; ops that define `centered` (layer_norm) take the mean, then the centred
// squares (two exact passes over registers, no division per element); others fold `accumulate`.
// budget: threads 256, registers 128, hot
template <int PerLane, int V, class Op, class T, class I>
__global__ void __launch_bounds__(256, rows_per_warp_min_blocks<PerLane, Op>)
rows_per_warp(const T* __restrict__ in, T* __restrict__ out, I rows, I cols, Op op) {
    static_assert(PerLane % V == 0, "a lane holds whole vectors");
    using C = typename Op::compute_t;
    using P = ops::Packed<T, V>;
    constexpr int vectors = PerLane / V;
    const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
    const int n = int(cols);  // at most 1024 on this path
    // With V > 1, cols is a multiple of V: a vector is all in the row or all out of it.
    auto in_row = [&](int k) { return (lane + k * 32) * V < n; };
    for (I base = I(blockIdx.x) * 8; base < rows; base += I(gridDim.x) * 8) {
        const I row = base + I(warp);
        if (row >= rows) continue;  // whole warps only: the shuffles below stay uniform
        const T* x = in + std::int64_t(row) * cols + lane * V;
        C v[PerLane];
#pragma unroll
        for (int k = 0; k < vectors; ++k) {
            if (in_row(k)) {
                const P p = *reinterpret_cast<const P*>(x + k * 32 * V);
#pragma unroll
                for (int j = 0; j < V; ++j) v[k * V + j] = ops::cast<C>(p.v[j]);
            } else {
#pragma unroll
                for (int j = 0; j < V; ++j) v[k * V + j] = C(0);
            }
        }
        T* y = out + std::int64_t(row) * cols + lane * V;
        auto store = [&](auto&& value) {
#pragma unroll
            for (int k = 0; k < vectors; ++k) {
                if (in_row(k)) {
                    P p;
#pragma unroll
                    for (int j = 0; j < V; ++j) p.v[j] = ops::cast<T>(value(k * V + j, std::int64_t(lane * V + k * 32 * V + j)));
                    *reinterpret_cast<P*>(y + k * 32 * V) = p;
                }
            }
        };
        if constexpr (requires(const Op& o) { o.shifted_exp(C(0), C(0)); }) {
            C m = -std::numeric_limits<C>::infinity();
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) m = ops::Maximum{}(m, v[k * V + j]);
            m = warp_all(ops::Maximum{}, m);
            C sum = 0;
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) {
                        const C e = op.shifted_exp(v[k * V + j], m);
                        sum += e;
                        if constexpr (Op::output_from_exp) v[k * V + j] = e;
                    }
            sum = warp_all([](C a, C b) { return a + b; }, sum);
            const auto f = op.finish_max_sum(m, sum);
            store([&](int i, std::int64_t) { return op.apply_shifted(f, v[i]); });
        } else if constexpr (requires(const Op& o) { o.centered(C(0), C(0), std::int64_t(0)); }) {
            C total = 0;
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) total += v[k * V + j];
            const C mean = warp_all([](C a, C b) { return a + b; }, total) / C(n);
            C squares = 0;
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) squares += (v[k * V + j] - mean) * (v[k * V + j] - mean);
            const auto f = op.centered(mean, warp_all([](C a, C b) { return a + b; }, squares), std::int64_t(n));
            store([&](int i, std::int64_t c) { return op.apply(f, v[i], c); });
        } else {
            auto s = op.identity();
#pragma unroll
            for (int k = 0; k < vectors; ++k)
                if (in_row(k))
#pragma unroll
                    for (int j = 0; j < V; ++j) s = op.accumulate(s, v[k * V + j]);
            const auto f = op.finish(warp_broadcast(warp_combine(op, s, 32)), cols);
            store([&](int i, std::int64_t c) { return op.apply(f, v[i], c); });
        }
    }
}

// Reads vectors [begin, end) of a row (thread t takes begin + t, + threads, ...), `unroll` loads in
// flight per thread, and accumulates their values into s; with a cache, vector i is also kept at
// cache[i - begin] for the output pass.
template <class Op, class P, class S, class I>
__device__ S accumulate_vectors(const Op& op, const P* __restrict__ x, P* cache, I begin, I end, I t, I threads, S s) {
    using C = typename Op::compute_t;
    constexpr int unroll = 4;
    constexpr int V = P::lanes;
    I i = begin + t;
    for (; i + (unroll - 1) * threads < end; i += unroll * threads) {
        P p[unroll];
#pragma unroll
        for (int u = 0; u < unroll; ++u) p[u] = x[i + I(u) * threads];
#pragma unroll
        for (int u = 0; u < unroll; ++u) {
            if (cache) cache[i + I(u) * threads - begin] = p[u];
#pragma unroll
            for (int j = 0; j < V; ++j) s = op.accumulate(s, ops::cast<C>(p[u].v[j]));
        }
    }
    for (; i < end; i += threads) {
        const P p = x[i];
        if (cache) cache[i - begin] = p;
#pragma unroll
        for (int j = 0; j < V; ++j) s = op.accumulate(s, ops::cast<C>(p.v[j]));
    }
    return s;
}

// Writes vectors [begin, end) of a row's output from `src` (src[i - src_begin] holds vector i).
template <class Op, class P, class F, class I>
__device__ void write_vectors(const Op& op, const F& f, const P* src, I src_begin, P* __restrict__ y, I begin, I end, I t, I threads) {
    using C = typename Op::compute_t;
    using T = typename P::value_type;
    constexpr int V = P::lanes;
    for (I i = begin + t; i < end; i += threads) {
        const P p = src[i - src_begin];
        P q;
#pragma unroll
        for (int j = 0; j < V; ++j) q.v[j] = ops::cast<T>(op.apply(f, ops::cast<C>(p.v[j]), std::int64_t(i) * V + j));
        y[i] = q;
    }
}

// The static shared memory of rows_per_block: the launch's dynamic bytes come on top of it.
template <class Op>
inline constexpr std::size_t rows_static_smem = 32 * sizeof(typename Op::stats_t);

// A block per row (any multiple of 32 threads up to 1024). With Cached, the launch gives cols * sizeof(T)
// bytes of dynamic shared memory; each thread reads back only the vectors it stored itself, so the
// cache needs no barrier of its own.
// budget: threads 1024, registers 64
template <int V, bool Cached, class Op, class T, class I>
__global__ void __launch_bounds__(1024) rows_per_block(const T* __restrict__ in, T* __restrict__ out, I rows, I cols, Op op) {
    using S = typename Op::stats_t;
    using P = ops::Packed<T, V>;
    __shared__ S across_warps[rows_static_smem<Op> / sizeof(S)];
    TESSEL_DYNAMIC_SHARED(P, cache);
    const I t = I(threadIdx.x), threads = I(blockDim.x), n = cols / I(V);
    for (I row = blockIdx.x; row < rows; row += gridDim.x) {
        const P* x = reinterpret_cast<const P*>(in + std::int64_t(row) * cols);
        const S s = accumulate_vectors(op, x, Cached ? cache : static_cast<P*>(nullptr), I(0), n, t, threads, op.identity());
        const auto f = op.finish(block_combine(op, s, across_warps), cols);
        write_vectors(op, f, Cached ? static_cast<const P*>(cache) : x, I(0), reinterpret_cast<P*>(out + std::int64_t(row) * cols), I(0), n,
                      t, threads);
    }
}

// The dynamic shared memory rows_per_cluster puts before its slice of the row: 32 statistics for
// block_combine and one for the block's result, which the cluster's other blocks read.
template <class Op>
inline constexpr std::size_t cluster_header_bytes = (33 * sizeof(typename Op::stats_t) + 15) / 16 * 16;

// Rows too long for one block's shared memory (sm_90): a cluster of blocks per row, block r keeping
// vectors [r * slice, (r + 1) * slice) in its dynamic shared memory. The blocks' statistics meet
// through distributed shared memory, combined in rank order by every block (so all agree), and each
// block writes its slice: the row is read from global memory once. Grid: clusters x blocks per
// cluster along x; everything another block reads lives in dynamic shared memory.
// budget: threads 1024, registers 64
template <int V, class Op, class T, class I>
__global__ void __launch_bounds__(1024) rows_per_cluster(const T* __restrict__ in, T* __restrict__ out, I rows, I cols, I slice, Op op) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    // No clusters before sm_90. The host takes this path on sm_90 devices only, but code built for an
    // older architecture can still be JIT-run on one: stop rather than leave the output unwritten.
    (void)in, (void)out, (void)rows, (void)cols, (void)slice, (void)op;
    __trap();
#else
    using S = typename Op::stats_t;
    using P = ops::Packed<T, V>;
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const unsigned blocks = cluster.num_blocks(), rank = cluster.block_rank();
    TESSEL_DYNAMIC_SHARED(unsigned char, smem);
    S* across_warps = reinterpret_cast<S*>(smem);
    S* block_stats = across_warps + 32;
    P* cache = reinterpret_cast<P*>(smem + cluster_header_bytes<Op>);
    const I t = I(threadIdx.x), threads = I(blockDim.x), n = cols / I(V);
    const I begin = I(rank) * slice < n ? I(rank) * slice : n, end = begin + slice < n ? begin + slice : n;
    for (I row = I(blockIdx.x) / I(blocks); row < rows; row += I(gridDim.x) / I(blocks)) {
        const P* x = reinterpret_cast<const P*>(in + std::int64_t(row) * cols);
        const S s = block_combine(op, accumulate_vectors(op, x, cache, begin, end, t, threads, op.identity()), across_warps);
        if (t == 0) *block_stats = s;
        cluster.sync();
        S all = op.identity();
        for (unsigned r = 0; r < blocks; ++r) all = op.combine(all, *cluster.map_shared_rank(block_stats, int(r)));
        write_vectors(op, op.finish(all, cols), static_cast<const P*>(cache), begin, reinterpret_cast<P*>(out + std::int64_t(row) * cols),
                      begin, end, t, threads);
        cluster.sync();  // block_stats is written again for the next row only after every block has read it
    }
#endif
}

}  // namespace tessel::kernels
