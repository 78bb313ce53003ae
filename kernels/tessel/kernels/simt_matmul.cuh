// SIMT matrix product for fp32 and fp64 (exact IEEE arithmetic, one fma per product):
// C = epilogue(A B, C) (gemm_epilogue.cuh: alpha, beta, bias, activation, residual), row-major
// A [M][K], B [K][N], C [M][N] with any leading dimensions,
// for `batches` products whose operands are batch strides apart (0 broadcasts an operand).
//
// A block computes a BM x BN tile of C from BK-deep slabs held twice in shared memory: while the
// threads multiply slab k out of one buffer they have already loaded slab k + 1 from global memory
// into registers, stored into the other buffer after the multiply (one barrier per slab). A is staged
// transposed (k-major, rows padded by one vector) so a thread reads its column fragment as vectors;
// each warp owns a WM x WN tile and each thread a TM x TN register tile made of V-wide strips spaced
// LM * V rows and LN * V columns apart, so a quarter-warp's vector reads of shared memory touch at
// most two addresses. Global loads are 16-byte vectors where the rows allow (Aligned), with scalar
// loads for the edges of M, N and K.
#pragma once

#include <cstdint>

#include <tessel/core/kernel.hpp>
#include <tessel/core/tile_grid.hpp>
#include <tessel/kernels/gemm_epilogue.cuh>

namespace tessel::kernels {

// One simt_matmul configuration: block tile BM x BN x BK, warps of LM x LN lanes each owning a
// TM x TN register tile. V is the vector width (16 bytes of T).
template <class T, int BM, int BN, int BK, int TM, int TN, int LM = 8, int LN = 4>
struct SimtTile {
    static constexpr int bm = BM, bn = BN, bk = BK, tm = TM, tn = TN, lm = LM, ln = LN;
    static constexpr int v = int(16 / sizeof(T));
    static constexpr int warp_m = LM * TM, warp_n = LN * TN;
    static constexpr int warps_m = BM / warp_m, warps_n = BN / warp_n;
    static constexpr int threads = warps_m * warps_n * 32;
    static constexpr int a_pad = v;  // A's k-major rows are BM + V long: the transposed stores spread over banks
    static_assert(LM * LN == 32, "a warp is 32 lanes");
    static_assert(TM % v == 0 && TN % v == 0, "register tiles are whole vectors");
    static_assert(BM % warp_m == 0 && BN % warp_n == 0, "the block tile is whole warp tiles");
    static_assert((BM * BK / v) % threads == 0 && (BK * BN / v) % threads == 0, "every thread loads whole vectors");
    static constexpr int a_vectors = BM * BK / v / threads, b_vectors = BK * BN / v / threads;
    static dim3 block() { return dim3(threads); }
    static dim3 grid(int m, int n, int batches = 1) { return tile_grid(m, n, batches, BM, BN); }
};

namespace simt_detail {
template <class T, int V>
struct Vec;
template <>
struct Vec<float, 4> {
    using type = float4;
};
template <>
struct Vec<double, 2> {
    using type = double2;
};
// One rounding per product-and-add, as the GPU's FFMA/DFMA (the sim's C library fma is exact too).
__device__ __forceinline__ float mul_add(float x, float y, float z) { return ::fmaf(x, y, z); }
__device__ __forceinline__ double mul_add(double x, double y, double z) { return ::fma(x, y, z); }
template <class T, int V>
__device__ __forceinline__ void load_vector(T (&dst)[V], const T* src) {
    const auto x = *reinterpret_cast<const typename Vec<T, V>::type*>(src);
    if constexpr (V == 4) dst[0] = x.x, dst[1] = x.y, dst[2] = x.z, dst[3] = x.w;
    else dst[0] = x.x, dst[1] = x.y;
}
}  // namespace simt_detail

// fp32 with 16-byte loads: two blocks per multiprocessor (at most 128 registers). fp64, and fp32's
// scalar-load variant, keep one: their epilogue math (erf, tanh, exp) spills under 128 registers.
template <class T, bool Aligned>
inline constexpr int simt_min_blocks = sizeof(T) == 4 && Aligned ? 2 : 1;

// budget: threads 256, registers 255, hot, mainloop 2
template <class T, class Tile, bool Aligned, class Epilogue = GemmEpilogue<T, T>>
__global__ void __launch_bounds__(Tile::threads, simt_min_blocks<T, Aligned>)
simt_matmul(int m, int n, int k, const T* __restrict__ a, int lda, std::int64_t batch_stride_a, const T* __restrict__ b, int ldb,
            std::int64_t batch_stride_b, T* c, int ldc, std::int64_t batch_stride_c, int batches, Epilogue epilogue) {
    using namespace simt_detail;
    constexpr int BM = Tile::bm, BN = Tile::bn, BK = Tile::bk, TM = Tile::tm, TN = Tile::tn, V = Tile::v, NT = Tile::threads;
    constexpr int AS = BM + Tile::a_pad;
    __shared__ __align__(16) T as[2][BK][AS];
    __shared__ __align__(16) T bs[2][BK][BN];

    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int lane_m = lane / Tile::ln, lane_n = lane % Tile::ln;
    const int thread_row = (warp / Tile::warps_n) * Tile::warp_m + lane_m * V;
    const int thread_col = (warp % Tile::warps_n) * Tile::warp_n + lane_n * V;
    const int col0 = int(blockIdx.x) * BN;

    for (int batch = int(blockIdx.z); batch < batches; batch += int(gridDim.z))
    for (std::int64_t first_row = std::int64_t(blockIdx.y) * BM; first_row < m; first_row += std::int64_t(gridDim.y) * BM) {
        const int row0 = int(first_row);
        const T* const a_batch = a + batch * batch_stride_a;
        const T* const b_batch = b + batch * batch_stride_b;
        T* const c_batch = c + batch * batch_stride_c;

        // Slab loads into registers: A as (row, V consecutive k), B as (k, V consecutive columns),
        // zero outside the matrices.
        T a_reg[Tile::a_vectors][V];
        alignas(16) T b_reg[Tile::b_vectors][V];
        auto load_slab = [&](int k0) {
#pragma unroll
            for (int i = 0; i < Tile::a_vectors; ++i) {
                const int id = tid + i * NT, r = id / (BK / V), kk = (id % (BK / V)) * V;
                const int gr = row0 + r, gk = k0 + kk;
                const T* src = a_batch + std::size_t(gr) * lda + gk;
                if (Aligned && gr < m && gk <= k - V) {  // k - V: gk + V overflows for k near 2^31
                    load_vector<T, V>(a_reg[i], src);
                } else {
#pragma unroll
                    for (int j = 0; j < V; ++j) a_reg[i][j] = gr < m && gk + j < k ? src[j] : T(0);
                }
            }
#pragma unroll
            for (int i = 0; i < Tile::b_vectors; ++i) {
                const int id = tid + i * NT, kk = id / (BN / V), cc = (id % (BN / V)) * V;
                const int gk = k0 + kk, gc = col0 + cc;
                const T* src = b_batch + std::size_t(gk) * ldb + gc;
                if (Aligned && gk < k && gc <= n - V) {
                    load_vector<T, V>(b_reg[i], src);
                } else {
#pragma unroll
                    for (int j = 0; j < V; ++j) b_reg[i][j] = gk < k && gc + j < n ? src[j] : T(0);
                }
            }
        };
        auto store_slab = [&](int buf) {
#pragma unroll
            for (int i = 0; i < Tile::a_vectors; ++i) {
                const int id = tid + i * NT, r = id / (BK / V), kk = (id % (BK / V)) * V;
#pragma unroll
                for (int j = 0; j < V; ++j) as[buf][kk + j][r] = a_reg[i][j];
            }
#pragma unroll
            for (int i = 0; i < Tile::b_vectors; ++i) {
                const int id = tid + i * NT, kk = id / (BN / V), cc = (id % (BN / V)) * V;
                *reinterpret_cast<typename Vec<T, V>::type*>(&bs[buf][kk][cc]) =
                    *reinterpret_cast<const typename Vec<T, V>::type*>(b_reg[i]);
            }
        };

        T acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = T(0);

        const int slabs = int((unsigned(k) + BK - 1) / BK);  // unsigned: k + BK - 1 overflows int for k near 2^31
        if (slabs > 0) {
            load_slab(0);
            store_slab(0);
        }
        __syncthreads();
        for (int s = 0; s < slabs; ++s) {
            const int buf = s & 1;
            if (s + 1 < slabs) load_slab((s + 1) * BK);  // in flight while this slab is multiplied
#pragma unroll
            for (int kk = 0; kk < BK; ++kk) {
                T af[TM], bf[TN];
#pragma unroll
                for (int g = 0; g < TM / V; ++g) {
                    T x[V];
                    load_vector<T, V>(x, &as[buf][kk][thread_row + g * Tile::lm * V]);
#pragma unroll
                    for (int j = 0; j < V; ++j) af[g * V + j] = x[j];
                }
#pragma unroll
                for (int g = 0; g < TN / V; ++g) {
                    T x[V];
                    load_vector<T, V>(x, &bs[buf][kk][thread_col + g * Tile::ln * V]);
#pragma unroll
                    for (int j = 0; j < V; ++j) bf[g * V + j] = x[j];
                }
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < TN; ++j) acc[i][j] = mul_add(af[i], bf[j], acc[i][j]);
            }
            // The other buffer was last read in slab s - 1, before the barrier that ended it.
            if (s + 1 < slabs) store_slab(buf ^ 1);
            __syncthreads();
        }

        // Epilogue (C not read unless it asks), vector stores where the strip lies inside N and C's
        // rows are aligned.
#pragma unroll
        for (int gi = 0; gi < TM / V; ++gi)
#pragma unroll
            for (int i = 0; i < V; ++i) {
                const int r = thread_row + gi * Tile::lm * V + i, gr = row0 + r;
                if (gr >= m) continue;
#pragma unroll
                for (int gj = 0; gj < TN / V; ++gj) {
                    const int gc = col0 + thread_col + gj * Tile::ln * V;
                    if (gc >= n) continue;
                    T* dst = c_batch + std::size_t(gr) * ldc + gc;
                    alignas(16) T out[V];
#pragma unroll
                    for (int j = 0; j < V; ++j) {  // columns past N are not stored, nor given to the epilogue
                        const T prior = epilogue.reads_prior() && gc + j < n ? dst[j] : T(0);
                        out[j] = gc + j < n ? epilogue(acc[gi * V + i][gj * V + j], prior, batch, gr, gc + j) : T(0);
                    }
                    if (Aligned && gc <= n - V && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) {
                        *reinterpret_cast<typename Vec<T, V>::type*>(dst) = *reinterpret_cast<const typename Vec<T, V>::type*>(out);
                    } else {
                        for (int j = 0; j < V && gc + j < n; ++j) dst[j] = out[j];
                    }
                }
            }
        // The next row tile's first slab overwrites buffer 0, which the last slab (if odd) read.
        __syncthreads();
    }
}

}  // namespace tessel::kernels
