// Copying a strided view into contiguous memory, by element size (E: an unsigned integer of the
// element's width; the bytes are moved, never interpreted).
//   permute_tiles: the output's fastest dim j is not the input's fastest dim i (a transpose in some
//     pair of dims, the rest batched). A Tile x Tile tile goes through swizzled shared memory, so
//     the reads run along i and the writes along j, both coalesced and (where rows are aligned)
//     in 16-byte chunks, without bank conflicts (TileMap).
//   gather_strided: anything else (the input's fastest dim is the output's, or no dim has stride
//     1): each thread turns its output index into input coordinates; writes are coalesced. Where
//     the fastest dim is kept, the host regroups it into words of up to 16 bytes (ops/copy.hpp).
#pragma once

#include <cstdint>

#include <tessel/core/divisor.hpp>
#include <tessel/core/grid_stride.hpp>
#include <tessel/core/kernel.hpp>
#include <tessel/tensor/layout.hpp>

namespace tessel::kernels {

// The dims of a tiled permute besides (i, j): which tile a block takes, and the batch coordinates
// to input and output offsets.
template <class I>
struct PermuteTiles {
    I size_i, size_j;          // the transposed pair: i is contiguous in the input, j in the output
    std::int64_t in_stride_j;  // input stride of j (input stride of i is 1)
    std::int64_t out_stride_i; // output stride of i (output stride of j is 1)
    Divisor<I> tiles_i;        // tiles along i
    Divisor<I> tiles_per_batch;
    I tiles;                   // in all
    int batch_rank;
    Divisor<I> batch_shape[max_rank];
    std::int64_t batch_in[max_rank];
    std::int64_t batch_out[max_rank];
};

// How permute_tiles' 256 threads cover a Tile x Tile tile in chunks of V elements, each one memory
// access of V * sizeof(E) bytes. A warp takes `lanes` neighbouring chunks of each of 32 / lanes
// neighbouring rows, as many as one 128-byte shared-memory wavefront serves, and a pass of the
// block covers rows_per_pass whole rows. The tile is kept as rows of the output (r: along i,
// c: along j); each row's chunks are permuted by XOR with a key from the row (a swizzle, not
// padding, so that chunks stay aligned for vector access). Then the element-wise stores of the
// input's chunks down a column and the chunk loads along a row both reach distinct banks:
// tests/ops/test_permute.cu ("the tiled transpose's shared memory has no bank conflicts") counts
// them for every instantiation.
template <int ElementBytes, int Tile, int V>
struct TileMap {
    static constexpr int threads = 256;
    static constexpr int chunks = Tile / V;  // per row
    static constexpr int bytes = V * ElementBytes;
    static constexpr int lanes = chunks < 128 / (bytes < 4 ? 4 : bytes) ? chunks : 128 / (bytes < 4 ? 4 : bytes);
    static constexpr int rows_per_warp = 32 / lanes;
    static constexpr int warps_across = chunks / lanes;
    static constexpr int rows_per_pass = threads / chunks;
    static constexpr int passes = Tile / rows_per_pass;
    static_assert(Tile % V == 0 && threads % chunks == 0 && 8 % warps_across == 0 && Tile % rows_per_pass == 0);

    // Thread t's chunk within its row, and its row in pass q.
    __host__ __device__ static constexpr int chunk(int t) { return t % 32 % lanes + lanes * (t / 32 % warps_across); }
    __host__ __device__ static constexpr int row(int t, int q) {
        return t % 32 / lanes + rows_per_warp * (t / 32 / warps_across) + q * rows_per_pass;
    }
    // The swizzle permutes units of a row: its chunks, or for single elements 4-byte words, by XOR
    // with a key that differs between the rows one warp's column access reaches.
    static constexpr int unit = V > 1 ? V : (ElementBytes < 4 ? 4 / ElementBytes : 1);
    static constexpr int rows_per_128_bytes = Tile * ElementBytes < 128 ? 128 / (Tile * ElementBytes) : 1;
    __host__ __device__ static constexpr int key(int r) { return V > 1 ? r / V % chunks : r / rows_per_128_bytes % (Tile / unit); }
    // Where element (r, c) of the tile lies in shared memory, in elements.
    __host__ __device__ static constexpr int at(int r, int c) { return r * Tile + ((c / unit) ^ key(r)) * unit + c % unit; }
};

// V elements of E as one aligned access.
template <class E, int V>
struct alignas(sizeof(E) * V) Chunk {
    E v[V];
};

// A whole tile through shared memory, `in` and `out` at its first element. Every load is issued
// before the first store to shared memory, and every shared read before the first global store.
template <class Map, class E, int V>
__device__ inline void move_tile(const E* __restrict__ in, E* __restrict__ out, E* tile, std::int64_t in_stride, std::int64_t out_stride) {
    using C = Chunk<E, V>;
    const int t = int(threadIdx.x);
    const int c = Map::chunk(t) * V;  // the thread's first element along its rows
    C v[Map::passes];                 // input rows j, along i
#pragma unroll
    for (int q = 0; q < Map::passes; ++q) v[q] = *reinterpret_cast<const C*>(in + std::int64_t(Map::row(t, q)) * in_stride + c);
#pragma unroll
    for (int q = 0; q < Map::passes; ++q)
#pragma unroll
        for (int k = 0; k < V; ++k) tile[Map::at(c + k, Map::row(t, q))] = v[q].v[k];
    __syncthreads();
    C u[Map::passes];  // output rows i, along j
#pragma unroll
    for (int q = 0; q < Map::passes; ++q) u[q] = *reinterpret_cast<const C*>(&tile[Map::at(Map::row(t, q), c)]);
#pragma unroll
    for (int q = 0; q < Map::passes; ++q) *reinterpret_cast<C*>(out + std::int64_t(Map::row(t, q)) * out_stride + c) = u[q];
    __syncthreads();  // the tile is reused by the block's next iteration
}

// A tile at the edge, of ni x nj elements: element by element, in the same shared-memory layout.
// Loads along i and stores along j stay coalesced; edge tiles are a small share of a large
// transpose's, so they trade speed for registers.
template <class Map, int Tile, class E>
__device__ inline void move_edge_tile(const E* __restrict__ in, E* __restrict__ out, E* tile, std::int64_t in_stride, std::int64_t out_stride,
                                      int ni, int nj) {
#pragma unroll 1
    for (int e = int(threadIdx.x); e < Tile * Tile; e += Map::threads) {
        const int j = e / Tile, i = e % Tile;
        if (i < ni && j < nj) tile[Map::at(i, j)] = in[std::int64_t(j) * in_stride + i];
    }
    __syncthreads();
#pragma unroll 1
    for (int e = int(threadIdx.x); e < Tile * Tile; e += Map::threads) {
        const int i = e / Tile, j = e % Tile;
        if (i < ni && j < nj) out[std::int64_t(i) * out_stride + j] = tile[Map::at(i, j)];
    }
    __syncthreads();  // the tile is reused by the block's next iteration
}

// budget: threads 256, registers 128, hot
// V > 1 when the host found both sides' rows aligned to V elements. Two blocks per SM at least:
// left free, ptxas keeps the tile's shared addresses live across the loop and spills some of them.
template <class E, int Tile, int V, class I>
__global__ void __launch_bounds__(256, 2) permute_tiles(const E* __restrict__ in, E* __restrict__ out, PermuteTiles<I> p) {
    using Map = TileMap<int(sizeof(E)), Tile, V>;
    struct alignas(16) Shared {
        E at[Tile * Tile];
    };
    __shared__ Shared shared;
    // Where tile w starts in the input and the output, and how much of it lies in the tensor.
    auto place = [&](I w, std::int64_t& in_at, std::int64_t& out_at, int& ni, int& nj) {
        I batch, rest, ti, tj;
        p.tiles_per_batch.divmod(w, batch, rest);
        p.tiles_i.divmod(rest, tj, ti);
        const I i0 = ti * Tile, j0 = tj * Tile;
        in_at = std::int64_t(i0) + std::int64_t(j0) * p.in_stride_j;
        out_at = std::int64_t(i0) * p.out_stride_i + std::int64_t(j0);
        for_each_coordinate<max_rank - 2>(batch, p.batch_rank, p.batch_shape, [&](int d, I k) {
            in_at += std::int64_t(k) * p.batch_in[d];
            out_at += std::int64_t(k) * p.batch_out[d];
        });
        ni = p.size_i - i0 < I(Tile) ? int(p.size_i - i0) : Tile;
        nj = p.size_j - j0 < I(Tile) ? int(p.size_j - j0) : Tile;
    };
    // Whole tiles first, then the edge tiles: two loops, so that the whole-tile path is a loop of
    // its own without guards (and the kernel report's hot loop).
    for (I w = blockIdx.x; w < p.tiles; w += gridDim.x) {
        std::int64_t in_at, out_at;
        int ni, nj;
        place(w, in_at, out_at, ni, nj);
        if (ni == Tile && nj == Tile) move_tile<Map, E, V>(in + in_at, out + out_at, shared.at, p.in_stride_j, p.out_stride_i);
    }
    for (I w = blockIdx.x; w < p.tiles; w += gridDim.x) {
        std::int64_t in_at, out_at;
        int ni, nj;
        place(w, in_at, out_at, ni, nj);
        if (ni < Tile || nj < Tile) move_edge_tile<Map, Tile>(in + in_at, out + out_at, shared.at, p.in_stride_j, p.out_stride_i, ni, nj);
    }
}

// A strided input read in the output's (row-major) order.
template <class I>
struct GatherStrided {
    int rank;
    Divisor<I> shape[max_rank];
    std::int64_t in_stride[max_rank];

    // Where the o-th element in row-major order lies in the strided tensor.
    __device__ std::int64_t offset(I o) const { return strided_offset<max_rank>(o, rank, shape, in_stride); }
};

// budget: threads 256, registers 32, hot
template <class E, class I>
__global__ void gather_strided(const E* __restrict__ in, E* __restrict__ out, GatherStrided<I> g, I n) {
    grid_stride_unrolled<2>(
        I(blockIdx.x) * blockDim.x + threadIdx.x, I(gridDim.x) * blockDim.x, n, [&](I o) { return in[g.offset(o)]; },
        [&](I o, const E& e) { out[o] = e; });
}

// The reverse: contiguous `in` written in row-major order into the strided view `out` (g.in_stride
// holds the view's strides). Reads are coalesced; copy_ uses it for strided device destinations.
// budget: threads 256, registers 32, hot
template <class E, class I>
__global__ void scatter_strided(const E* __restrict__ in, E* __restrict__ out, GatherStrided<I> g, I n) {
    grid_stride_unrolled<2>(
        I(blockIdx.x) * blockDim.x + threadIdx.x, I(gridDim.x) * blockDim.x, n, [&](I o) { return in[o]; },
        [&](I o, const E& e) { out[g.offset(o)] = e; });
}

}  // namespace tessel::kernels
