// Tiled shared-memory matrix product: C = alpha * A * B + beta * C, row-major with leading dimensions.
// Each block computes a TileM x TileN tile of C, staging TileK-deep slabs of A and B in shared
// memory; each thread accumulates a ThreadM x ThreadN micro-tile in registers. Plain CUDA C++: it
// runs on the GPU and in the sim unchanged. With beta == 0, C is never read (it may hold garbage).
#pragma once

#include <cstdint>

#include <tessel/core/kernel.hpp>
#include <tessel/core/tile_grid.hpp>

namespace tessel::kernels {

// The shape of one tiled_matmul instantiation; block() and grid() give its launch configuration.
template <int TileM, int TileN, int TileK, int ThreadM, int ThreadN>
struct MatmulTile {
    static_assert(TileM % ThreadM == 0 && TileN % ThreadN == 0, "a tile must split evenly into thread micro-tiles");
    static constexpr int tile_m = TileM, tile_n = TileN, tile_k = TileK, thread_m = ThreadM, thread_n = ThreadN;
    static constexpr int threads_x = TileN / ThreadN, threads_y = TileM / ThreadM;
    static constexpr int threads = threads_x * threads_y;
    static dim3 block() { return dim3(threads_x, threads_y); }
    // Column tiles along x, row tiles along y (at most 65535: taller matrices have each block walk
    // row tiles, 4.19M rows for 64-row tiles).
    static dim3 grid(int m, int n) { return tile_grid(m, n, 1, TileM, TileN); }
};

// budget: threads 256, registers 64, hot, mainloop 2
template <class T, class Acc, class Tile>
__global__ void __launch_bounds__(Tile::threads)
tiled_matmul(int m, int n, int k, Acc alpha, const T* __restrict__ a, int lda, const T* __restrict__ b, int ldb,
             Acc beta, T* __restrict__ c, int ldc) {
    constexpr int TM = Tile::tile_m, TN = Tile::tile_n, TK = Tile::tile_k;
    constexpr int RM = Tile::thread_m, RN = Tile::thread_n, NT = Tile::threads;
    // A is stored k-major (transposed) so the inner loop reads RM consecutive values; +1 pads banks.
    __shared__ Acc as[TK][TM + 1];
    __shared__ Acc bs[TK][TN + 1];

    const int tx = int(threadIdx.x), ty = int(threadIdx.y);
    const int tid = ty * Tile::threads_x + tx;
    const int col0 = int(blockIdx.x) * TN;
    for (std::int64_t first_row = std::int64_t(blockIdx.y) * TM; first_row < m; first_row += std::int64_t(gridDim.y) * TM) {
        const int row0 = int(first_row);  // 64-bit step: m + 65535 * TM may pass 2^31
        Acc acc[RM][RN];
        for (int i = 0; i < RM; ++i)
            for (int j = 0; j < RN; ++j) acc[i][j] = Acc(0);

        for (int k0 = 0; k0 < k; k0 += TK) {
            for (int e = tid; e < TM * TK; e += NT) {  // A slab: TM rows x TK columns, zero outside
                const int r = e / TK, kk = e % TK;
                const int gr = row0 + r, gk = k0 + kk;
                as[kk][r] = (gr < m && gk < k) ? Acc(a[std::size_t(gr) * lda + gk]) : Acc(0);
            }
            for (int e = tid; e < TK * TN; e += NT) {  // B slab: TK rows x TN columns
                const int kk = e / TN, col = e % TN;
                const int gk = k0 + kk, gc = col0 + col;
                bs[kk][col] = (gk < k && gc < n) ? Acc(b[std::size_t(gk) * ldb + gc]) : Acc(0);
            }
            __syncthreads();
            for (int kk = 0; kk < TK; ++kk) {
                Acc ra[RM], rb[RN];
                for (int i = 0; i < RM; ++i) ra[i] = as[kk][ty * RM + i];
                for (int j = 0; j < RN; ++j) rb[j] = bs[kk][tx * RN + j];
                for (int i = 0; i < RM; ++i)
                    for (int j = 0; j < RN; ++j) acc[i][j] += ra[i] * rb[j];
            }
            __syncthreads();  // the slabs are overwritten by the next k0 (or the next row tile)
        }

        for (int i = 0; i < RM; ++i) {
            const int gr = row0 + ty * RM + i;
            if (gr >= m) break;
            for (int j = 0; j < RN; ++j) {
                const int gc = col0 + tx * RN + j;
                if (gc >= n) break;
                T* out = c + std::size_t(gr) * ldc + gc;
                const Acc prior = beta == Acc(0) ? Acc(0) : beta * Acc(*out);
                *out = T(alpha * acc[i][j] + prior);
            }
        }
    }
}

}  // namespace tessel::kernels
