// Reductions: out[o] = finish(combine over k of load(element k of output o)), for every output o,
// where the elements come from a tensor (TensorSource) or an element-wise expression evaluated as it
// is read (ExpressionSource: a fused map-reduce, nothing materialised).
// A group of Threads (32: a warp, or 256: the block) reduces one (output, split) work item: each
// thread accumulates a fixed strided subset of the split's range, then the group combines through
// warp shuffles (and shared memory across warps). With one split the group writes the final value;
// with several (or when the host passes partials: an output of 2^31 elements or more, reduced in
// pieces of it), each split writes its partial accumulator and reduce_partials finishes them
// (a block per output). Every
// order is fixed by (Threads, splits, K), never by timing: results are bitwise reproducible, and no
// atomics are used.
#pragma once

#include <concepts>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <tessel/core/divisor.hpp>
#include <tessel/core/kernel.hpp>
#include <tessel/ops/expression.hpp>

namespace tessel::kernels {

// Where a reduction's elements are: output o's elements start at outer(o), element k of it is
// inner(k) further. Both are flat indices turned into coordinates over (coalesced) dims.
template <class I>
struct ReduceIndexer {
    int outer_rank;
    int inner_rank;
    Divisor<I> outer_shape[max_rank];
    std::int64_t outer_stride[max_rank];
    Divisor<I> inner_shape[max_rank];
    std::int64_t inner_stride[max_rank];

    __host__ __device__ std::int64_t outer(I o) const { return strided_offset<max_rank>(o, outer_rank, outer_shape, outer_stride); }
    __host__ __device__ std::int64_t inner(I k) const {
        return inner_rank == 1 ? std::int64_t(k) * inner_stride[0] : strided_offset<max_rank>(k, inner_rank, inner_shape, inner_stride);
    }
};

// The elements of a tensor: output o's row starts at in + outer(o); element k is inner(k) further.
template <class T, class I>
struct TensorSource {
    using value_type = T;
    const T* in;
    ReduceIndexer<I> ix;
    __device__ const T* row(I o) const { return in + ix.outer(o); }
    __device__ T at(const T* row, I k) const { return row[ix.inner(k)]; }
};

// The elements of an element-wise expression (a lowered tree), evaluated where they are read: the
// expression's dims are ordered kept-then-reduced and coalesced, so element k of output o is flat
// element o * K + k of that iteration. Linear: one dim walked with stride 0 or 1 by every operand.
template <class D, class E, class I, bool Linear>
struct ExpressionSource {
    using value_type = D;
    E expr;
    I K;
    int rank;
    Divisor<I> shape[max_rank];
    __device__ I row(I o) const { return o * K; }
    __device__ D at(I row, I k) const {
        const I i = row + k;
        if constexpr (Linear) {
            return ops::cast<D>(expr.eval(ops::LinearIndex<I>{i}));
        } else {
            I coord[max_rank] = {};
            for_each_coordinate<max_rank>(i, rank, shape, [&](int d, I k) { coord[d] = k; });
            return ops::cast<D>(expr.eval(ops::CoordIndex<I>{coord, rank}));
        }
    }
};

// Shuffles any trivially copyable value down `delta` lanes within groups of `width`, 32 bits at a time.
template <class A>
__device__ A shuffle_down(const A& a, unsigned delta, int width) {
    constexpr int words = int((sizeof(A) + 3) / 4);
    unsigned w[words] = {};
    std::memcpy(w, &a, sizeof(A));
    for (int i = 0; i < words; ++i) w[i] = __shfl_down_sync(0xffffffffu, w[i], delta, width);
    A r;
    std::memcpy(&r, w, sizeof(A));
    return r;
}

// Combines the values of `width` consecutive lanes into the first of them (a fixed tree).
template <class Op, class A>
__device__ A warp_combine(const Op& op, A acc, int width) {
    for (int d = width / 2; d >= 1; d /= 2) acc = op.combine(acc, shuffle_down(acc, unsigned(d), width));
    return acc;
}

// Whether Op folds N elements into an accumulator at once (reducers.hpp: argmax and argmin, var
// and std), cheaper than N loads and combines.
template <class Op, class T, int N>
concept folds_elements = requires(const Op& op, typename Op::acc_t a, const T (&x)[N]) {
    { op.template fold<N>(a, x, std::int64_t(0), std::int64_t(1)) } -> std::same_as<typename Op::acc_t>;
};
// Whether Op's fold ignores the elements' positions (var: any N elements are a group), so that the
// vector loop may fold groups_of<V> vectors at once, each from its own place in the row; argmax's
// fold takes N consecutive positions.
template <class Op, class T, int N>
concept folds_unordered = folds_elements<Op, T, N> && requires { requires Op::fold_ignores_positions; };
// Vectors per group: 16 elements of 2 or 4 bytes (2 or 4 vectors), 8 doubles, one vector of 1 byte
// (32 bf16 elements a group issue 6.3 instructions each against 7.9, but take 55 registers of 56).
template <int V>
inline constexpr int groups_of = 16 / V > 4 ? 4 : 16 / V > 1 ? 16 / V : 1;

// A thread's elements k, k + Step, ... below end, in order, into acc; at(k) reads element k. An
// op that folds takes them four at a time (four loads in flight, one fold), then one by one.
template <int Step, class Op, class At, class I>
__device__ typename Op::acc_t accumulate_with(const Op& op, const At& at, I k, I end, typename Op::acc_t acc) {
    using T = std::remove_cvref_t<decltype(at(k))>;
    if constexpr (folds_elements<Op, T, 4>) {
        for (; k + 3 * I(Step) < end; k += 4 * I(Step)) {
            T x[4];
            for (int j = 0; j < 4; ++j) x[j] = at(k + I(j) * I(Step));
            acc = op.template fold<4>(acc, x, std::int64_t(k), Step);
        }
    }
    for (; k < end; k += I(Step)) acc = op.combine(acc, op.load(at(k), std::int64_t(k)));
    return acc;
}

// The same over a source's row (or column). A tensor's reduced elements one stride apart (one
// reduced dim after coalescing: columns, rows that are not 16-byte aligned) are read with that
// stride in a loop of their own, not through the general coordinate arithmetic that the compiler
// otherwise keeps inside the loop once the op's per-element code is large (argmax, var).
template <int Step, class Src, class Op, class Row, class I>
__device__ typename Op::acc_t accumulate_strided(const Src& src, const Op& op, const Row& row, I k, I end, typename Op::acc_t acc) {
    if constexpr (requires { src.ix.inner_stride[0]; }) {
        if (src.ix.inner_rank == 1) {
            const std::int64_t stride = src.ix.inner_stride[0];
            return accumulate_with<Step>(op, [&](I i) { return row[std::int64_t(i) * stride]; }, k, end, acc);
        }
    }
    return accumulate_with<Step>(op, [&](I i) { return src.at(row, i); }, k, end, acc);
}

// What a work item writes as a partial result: the op's partial(acc) where it has one (argmax and
// argmin move their positions from the launch's count to the output's), else the accumulator.
template <class Op, class A>
__device__ A partial_result(const Op& op, const A& acc) {
    if constexpr (requires { op.partial(acc); }) return op.partial(acc);
    else return acc;
}

// Threads: 1, 32 or 256 threads per work item (blockDim.x must be 256); 1 is for rows shorter than a
// warp (argmax over 10 classes), which would otherwise keep 1 or 2 lanes of each warp busy. V: elements per vector load
// (1, or 16 bytes' worth when the host found every row of a TensorSource contiguous, aligned and a
// multiple of V long).
// budget: threads 256, registers 56, hot
template <int Threads, int V, class Op, class Src, class I>
__global__ void reduce(Src src, Op op, I outputs, I K, I splits, I chunk, typename Op::acc_t* __restrict__ partial,
                       typename Op::out_t* __restrict__ out) {
    using T = typename Src::value_type;
    static_assert(Threads == 1 || Threads == 32 || Threads == 256, "a reduction group is a thread, a warp or the whole block");
    using A = typename Op::acc_t;
    constexpr int groups = 256 / Threads;
    __shared__ A across_warps[8];
    const int group = int(threadIdx.x) / Threads, lane = int(threadIdx.x) % Threads;
    const I items = outputs * splits;
    // The loop bound is the same for every thread of a group, so shuffles and barriers stay uniform.
    for (I base = I(blockIdx.x) * groups; base < items; base += I(gridDim.x) * groups) {
        const I item = base + I(group);
        A acc = op.identity();
        if (item < items) {
            const I o = item / splits, s = item % splits;
            const I begin = s * chunk, end = begin + chunk < K ? begin + chunk : K;
            const auto row = src.row(o);
            if constexpr (V > 1) {
                I k = begin + I(lane) * V;
                if constexpr (folds_unordered<Op, T, groups_of<V> * V>) {
                    // U vectors a pass, folded as one group: U loads in flight, one merge.
                    constexpr int U = groups_of<V>;
                    for (; k + I(U - 1) * I(Threads) * V < end; k += I(U) * I(Threads) * V) {
                        T x[U * V];
#pragma unroll
                        for (int u = 0; u < U; ++u) {
                            const auto p = *reinterpret_cast<const ops::Packed<T, V>*>(row + k + I(u) * I(Threads) * V);
#pragma unroll
                            for (int j = 0; j < V; ++j) x[u * V + j] = p.v[j];
                        }
                        acc = op.template fold<U * V>(acc, x, std::int64_t(k), 1);
                    }
                }
                for (; k < end; k += I(Threads) * V) {
                    const auto p = *reinterpret_cast<const ops::Packed<T, V>*>(row + k);
                    if constexpr (folds_elements<Op, T, V>) {
                        acc = op.template fold<V>(acc, p.v, std::int64_t(k), 1);
                    } else {
                        for (int j = 0; j < V; ++j) acc = op.combine(acc, op.load(p.v[j], std::int64_t(k) + j));
                    }
                }
            } else {
                acc = accumulate_strided<Threads>(src, op, row, begin + I(lane), end, acc);
            }
        }
        if constexpr (Threads > 1) acc = warp_combine(op, acc, 32);
        if constexpr (Threads == 256) {
            if (lane % 32 == 0) across_warps[lane / 32] = acc;
            __syncthreads();
            acc = lane < 8 ? across_warps[lane] : op.identity();
            if (lane < 32) acc = warp_combine(op, acc, 8);
            __syncthreads();  // across_warps is reused by the next item
        }
        if (lane == 0 && item < items) {
            if (partial == nullptr) out[item] = op.finish(acc, std::int64_t(K));
            else partial[item] = partial_result(op, acc);
        }
    }
}

// Column reductions: outputs that are neighbours in memory (the kept dims' fastest stride is 1) and
// reduced elements that are not. A 256-thread block takes Width neighbouring outputs (32, or 16 or
// 4 when there are that few, so that narrow columns such as a sum over the rows of [N, 4] keep
// every lane busy): thread t accumulates output t % Width over elements t / Width,
// t / Width + 256 / Width, ... of the split, so each warp reads 32 / Width neighbouring rows of
// Width outputs per step (coalesced). An output's slices then combine on a fixed tree: shuffles
// within the warp, then the 8 warps' values in order through shared memory.
// budget: threads 256, registers 56, hot
template <int Width, class Op, class Src, class I>
__global__ void reduce_columns(Src src, Op op, I outputs, I K, I splits, I chunk, typename Op::acc_t* __restrict__ partial,
                               typename Op::out_t* __restrict__ out) {
    using A = typename Op::acc_t;
    constexpr int slices = 256 / Width, warps = 8;
    __shared__ A partials[warps][Width];
    const int x = int(threadIdx.x) % Width, y = int(threadIdx.x) / Width, lane = int(threadIdx.x) % 32;
    const I items = (outputs + Width - 1) / Width * splits;
    for (I item = blockIdx.x; item < items; item += gridDim.x) {
        const I o = item / splits * Width + I(x), s = item % splits;
        const I begin = s * chunk, end = begin + chunk < K ? begin + chunk : K;
        A acc = op.identity();
        if (o < outputs) {
            const auto column = src.row(o);
            acc = accumulate_strided<slices>(src, op, column, begin + I(y), end, acc);
        }
        for (int d = 16; d >= Width; d /= 2) acc = op.combine(acc, shuffle_down(acc, unsigned(d), 32));  // lanes x, x + Width, ...
        if (lane < Width) partials[threadIdx.x / 32][x] = acc;
        __syncthreads();
        if (threadIdx.x < unsigned(Width)) {
            for (int w = 1; w < warps; ++w) acc = op.combine(acc, partials[w][x]);
            if (o < outputs) {
                if (partial == nullptr) out[o] = op.finish(acc, std::int64_t(K));
                else partial[o * splits + s] = partial_result(op, acc);
            }
        }
        __syncthreads();  // partials is reused by the next item
    }
}

// Finishes split reductions: a block per output combines its `splits` partials on a fixed tree
// (thread t folds partials t, t + 256, ... in order, then the block's shuffle tree), so the order
// depends on `splits` only, and an output's partials are read by 256 threads at once instead of
// one after another by a single thread.
// budget: threads 256, registers 48, hot
template <class Op, class I>
__global__ void reduce_partials(const typename Op::acc_t* __restrict__ partial, Op op, I outputs, I splits, std::int64_t K,
                                typename Op::out_t* __restrict__ out) {
    using A = typename Op::acc_t;
    __shared__ A across_warps[8];
    const int t = int(threadIdx.x);
    for (I o = blockIdx.x; o < outputs; o += gridDim.x) {
        const A* p = partial + std::int64_t(o) * splits;
        A acc = op.identity();
#pragma unroll 4
        for (I s = I(t); s < splits; s += 256) acc = op.combine(acc, p[s]);
        acc = warp_combine(op, acc, 32);
        if (t % 32 == 0) across_warps[t / 32] = acc;
        __syncthreads();
        if (t < 32) {
            acc = t < 8 ? across_warps[t] : op.identity();
            acc = warp_combine(op, acc, 8);
            if (t == 0) out[o] = op.finish(acc, K);
        }
        __syncthreads();  // across_warps is reused by the next output
    }
}

}  // namespace tessel::kernels
