// The kernels that evaluate a lowered element-wise expression tree (include/tessel/ops/): one
// launch computes the whole tree for every output element.
//   evaluate_contiguous: every operand has stride 1 (or 0: broadcast) over one flat range; each
//     thread handles V consecutive elements with one aligned V*sizeof(T) access per operand, the
//     tail (n % V elements) element by element.
//   evaluate_rows: rank 2, every operand walking the columns with stride 0 or 1 (row and column
//     broadcasts): V columns of a row per thread, aligned accesses as in evaluate_contiguous.
//   evaluate_strided: any layouts; a thread turns its flat index into coordinates over the
//     (coalesced) output shape, by multiply-shift divisors fixed at launch, and each operand
//     applies its own strides.
// All are grid-stride loops, so any grid size covers any n below 2^31 (the host launches larger
// iterations in pieces).
#pragma once

#include <cstdint>

#include <tessel/core/divisor.hpp>
#include <tessel/core/grid_stride.hpp>
#include <tessel/core/kernel.hpp>
#include <tessel/ops/expression.hpp>

namespace tessel::kernels {

// budget: threads 256, registers 40, hot
// Each step of the grid-stride loop evaluates U vectors a grid apart (each one coalesced across the
// warp), every one before the first store: U times the bytes in flight per thread of a loop that
// waits for each load before the next.
template <int V, class Out, class E, class I>
__global__ void evaluate_contiguous(Out* __restrict__ out, E expr, I n) {
    constexpr int U = V > 1 ? 2 : 4;
    using R = decltype(expr.eval(ops::VectorIndex<I, V>{I(0)}));
    const I stride = I(gridDim.x) * blockDim.x;
    const I first = I(blockIdx.x) * blockDim.x + threadIdx.x;
    const I vectors = n / V;
    auto store = [&](I at, const R& r) {
        ops::Packed<Out, V> p;
        for (int k = 0; k < V; ++k) p.v[k] = ops::cast<Out>(r[k]);
        *reinterpret_cast<ops::Packed<Out, V>*>(out + at * V) = p;
    };
    I v = first;
    for (; v + I(U - 1) * stride < vectors; v += stride * I(U)) {  // U whole steps: no guards
        R r[U];
#pragma unroll
        for (int u = 0; u < U; ++u) r[u] = expr.eval(ops::VectorIndex<I, V>{I((v + I(u) * stride) * V)});
#pragma unroll
        for (int u = 0; u < U; ++u) store(v + I(u) * stride, r[u]);
    }
    for (; v < vectors; v += stride) store(v, expr.eval(ops::VectorIndex<I, V>{I(v * V)}));
    for (I i = vectors * V + first; i < n; i += stride) out[i] = ops::cast<Out>(expr.eval(ops::LinearIndex<I>{i}));
}

// budget: threads 256, registers 48, hot
// A rank-2 iteration whose operands and output all walk the columns with stride 0 or 1 (a bias
// add [M, N] + [N], a column scale [M, N] * [M, 1], either on rows padded apart): each thread
// takes V consecutive columns of one row with one aligned access per operand, the row's last
// cols % V columns element by element. The host checks that every row start is aligned to V.
template <int V, class Out, class E, class I>
__global__ void evaluate_rows(Out* __restrict__ out, std::int64_t out_row_stride, E expr, I cols, Divisor<I> chunks_per_row, I chunks) {
    const I stride = I(gridDim.x) * blockDim.x;
    for (I w = I(blockIdx.x) * blockDim.x + threadIdx.x; w < chunks; w += stride) {
        I row, chunk;
        chunks_per_row.divmod(w, row, chunk);
        const I col = chunk * V;
        Out* to = out + std::int64_t(row) * out_row_stride + col;
        if (col + V <= cols) {
            const auto r = expr.eval(ops::RowVectorIndex<I, V>{row, col});
            ops::Packed<Out, V> p;
            for (int k = 0; k < V; ++k) p.v[k] = ops::cast<Out>(r[k]);
            *reinterpret_cast<ops::Packed<Out, V>*>(to) = p;
        } else {
#pragma unroll
            for (int k = 0; k < V - 1; ++k)  // unrolled: no loop inside the hot one
                if (col + I(k) < cols) to[k] = ops::cast<Out>(expr.eval(ops::RowIndex<I>{row, I(col + I(k))}));
        }
    }
}

// The output of a strided evaluation: its first element, the iteration's shape (as divisors) and
// its strides.
template <class Out, class I>
struct StridedOutput {
    Out* data;
    int rank;
    Divisor<I> shape[max_rank];
    std::int64_t stride[max_rank];
};

// budget: threads 256, registers 40, hot
template <class Out, class E, class I>
__global__ void evaluate_strided(StridedOutput<Out, I> out, E expr, I n) {
    struct Evaluated {
        std::int64_t at;
        Out value;
    };
    // Two elements in flight per thread. I is 32 bits wide: the host cuts iterations of 2^31
    // elements or more into pieces (ops/pieces.hpp).
    grid_stride_unrolled<2>(
        I(blockIdx.x) * blockDim.x + threadIdx.x, I(gridDim.x) * blockDim.x, n,
        [&](I i) {
            I coord[max_rank] = {};
            std::int64_t at = 0;
            for_each_coordinate<max_rank>(i, out.rank, out.shape, [&](int d, I k) {
                coord[d] = k;
                at += std::int64_t(k) * out.stride[d];
            });
            return Evaluated{at, ops::cast<Out>(expr.eval(ops::CoordIndex<I>{coord, out.rank}))};
        },
        [&](I, const Evaluated& e) { out.data[e.at] = e.value; });
}

}  // namespace tessel::kernels
