// Copying a strided view into contiguous memory, by element size (E: an unsigned integer of the
// element's width; the bytes are moved, never interpreted).
//   permute_tiles: the output's fastest dim j is not the input's fastest dim i (a transpose in some
//     pair of dims, the rest batched). A Tile x Tile tile goes through shared memory padded by one
//     column, so the reads run along i and the writes along j: both coalesced, no bank conflicts.
//   gather_strided: anything else (the input's fastest dim is the output's, or no dim has stride
//     1): each thread turns its output index into input coordinates; writes are coalesced.
#pragma once

#include <cstdint>

#include <tessel/core/divisor.hpp>
#include <tessel/core/kernel.hpp>
#include <tessel/tensor/layout.hpp>

namespace tessel::kernels {

// The dims of a tiled permute besides (i, j): batch coordinates to input and output offsets.
template <class I>
struct PermuteTiles {
    I size_i, size_j;          // the transposed pair: i is contiguous in the input, j in the output
    std::int64_t in_stride_j;  // input stride of j (input stride of i is 1)
    std::int64_t out_stride_i; // output stride of i (output stride of j is 1)
    int batch_rank;
    I batches;
    I batch_shape[max_rank];
    std::int64_t batch_in[max_rank];
    std::int64_t batch_out[max_rank];
};

// budget: threads 256, registers 48, hot
template <class E, int Tile, int Rows, class I>
__global__ void permute_tiles(const E* __restrict__ in, E* __restrict__ out, PermuteTiles<I> p) {
    __shared__ E tile[Tile][Tile + 1];
    const I tiles_i = (p.size_i + Tile - 1) / Tile, tiles_j = (p.size_j + Tile - 1) / Tile;
    const I tiles = tiles_i * tiles_j * p.batches;
    for (I t = blockIdx.x; t < tiles; t += gridDim.x) {
        const I b = t / (tiles_i * tiles_j), rest = t % (tiles_i * tiles_j);
        const I i0 = (rest % tiles_i) * Tile, j0 = (rest / tiles_i) * Tile;
        std::int64_t in_base = 0, out_base = 0;
        I c = b;
        for (int d = p.batch_rank - 1; d >= 0; --d) {
            const I k = c % p.batch_shape[d];
            c /= p.batch_shape[d];
            in_base += std::int64_t(k) * p.batch_in[d];
            out_base += std::int64_t(k) * p.batch_out[d];
        }
        for (int r = int(threadIdx.y); r < Tile; r += Rows) {
            const I i = i0 + threadIdx.x, j = j0 + I(r);
            if (i < p.size_i && j < p.size_j) tile[r][threadIdx.x] = in[in_base + std::int64_t(i) + std::int64_t(j) * p.in_stride_j];
        }
        __syncthreads();
        for (int r = int(threadIdx.y); r < Tile; r += Rows) {
            const I i = i0 + I(r), j = j0 + threadIdx.x;
            if (i < p.size_i && j < p.size_j) out[out_base + std::int64_t(i) * p.out_stride_i + std::int64_t(j)] = tile[threadIdx.x][r];
        }
        __syncthreads();  // the tile is reused by the block's next iteration
    }
}

// A strided input read in the output's (row-major) order.
template <class I>
struct GatherStrided {
    int rank;
    Divisor<I> shape[max_rank];
    std::int64_t in_stride[max_rank];

    // Where the o-th element in row-major order lies in the strided tensor (unrolled to max_rank
    // with a guard: the parameters are read in place, not copied to local memory).
    __device__ std::int64_t offset(I o) const {
        std::int64_t at = 0;
#pragma unroll
        for (int d = max_rank - 1; d >= 0; --d) {
            if (d < rank) {
                I r;
                shape[d].divmod(o, o, r);
                at += std::int64_t(r) * in_stride[d];
            }
        }
        return at;
    }
};

// budget: threads 256, registers 32, hot
template <class E, class I>
__global__ void gather_strided(const E* __restrict__ in, E* __restrict__ out, GatherStrided<I> g, I n) {
    for (I o = I(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += I(gridDim.x) * blockDim.x) {
        out[o] = in[g.offset(o)];
    }
}

// The reverse: contiguous `in` written in row-major order into the strided view `out` (g.in_stride
// holds the view's strides). Reads are coalesced; copy_ uses it for strided device destinations.
// budget: threads 256, registers 32, hot
template <class E, class I>
__global__ void scatter_strided(const E* __restrict__ in, E* __restrict__ out, GatherStrided<I> g, I n) {
    for (I o = I(blockIdx.x) * blockDim.x + threadIdx.x; o < n; o += I(gridDim.x) * blockDim.x) {
        out[g.offset(o)] = in[o];
    }
}

}  // namespace tessel::kernels
