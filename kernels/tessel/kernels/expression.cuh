// The kernels that evaluate a lowered element-wise expression tree (include/tessel/ops/): one
// launch computes the whole tree for every output element.
//   evaluate_contiguous: every operand has stride 1 (or 0: broadcast) over one flat range; each
//     thread handles V consecutive elements with one aligned V*sizeof(T) access per operand, the
//     tail (n % V elements) element by element.
//   evaluate_strided: any layouts; a thread turns its flat index into coordinates over the
//     (coalesced) output shape, by multiply-shift divisors fixed at launch, and each operand
//     applies its own strides.
// Both are grid-stride loops, so any grid size covers any n.
#pragma once

#include <cstdint>

#include <tessel/core/divisor.hpp>
#include <tessel/core/kernel.hpp>
#include <tessel/ops/expression.hpp>

namespace tessel::kernels {

// budget: threads 256, registers 40, hot
template <int V, class Out, class E, class I>
__global__ void evaluate_contiguous(Out* __restrict__ out, E expr, I n) {
    const I stride = I(gridDim.x) * blockDim.x;
    const I first = I(blockIdx.x) * blockDim.x + threadIdx.x;
    const I vectors = n / V;
    for (I v = first; v < vectors; v += stride) {
        const auto r = expr.eval(ops::VectorIndex<I, V>{I(v * V)});
        ops::Packed<Out, V> p;
        for (int k = 0; k < V; ++k) p.v[k] = ops::cast<Out>(r[k]);
        *reinterpret_cast<ops::Packed<Out, V>*>(out + v * V) = p;
    }
    for (I i = vectors * V + first; i < n; i += stride) out[i] = ops::cast<Out>(expr.eval(ops::LinearIndex<I>{i}));
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
// The loops over dims run to max_rank with a guard, fully unrolled, so the coordinates stay in
// registers and the parameters are read where they are (no copy to local memory).
template <class Out, class E, class I>
__global__ void evaluate_strided(StridedOutput<Out, I> out, E expr, I n) {
    const I stride = I(gridDim.x) * blockDim.x;
    for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        I coord[max_rank];
        I rest = i;
        std::int64_t at = 0;
#pragma unroll
        for (int d = max_rank - 1; d >= 0; --d) {
            coord[d] = 0;
            if (d < out.rank) {
                out.shape[d].divmod(rest, rest, coord[d]);
                at += std::int64_t(coord[d]) * out.stride[d];
            }
        }
        out.data[at] = ops::cast<Out>(expr.eval(ops::CoordIndex<I>{coord, out.rank}));
    }
}

}  // namespace tessel::kernels
