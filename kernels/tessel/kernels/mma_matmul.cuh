// Tensor-core matrix product for 16-bit inputs (bf16, fp16) with fp32 accumulation:
// C = epilogue(A * B, C), A row-major [M][K], B row-major [K][N] (or, with BColumns, stored by
// columns: B^T row-major [N][K], as a linear layer's weight), C row-major [M][N], any M, N, K, for
// `batches` such products whose operands are batch strides apart (0 broadcasts one operand).
// The main loop is a Stages-deep cp.async pipeline (one barrier per BK-deep slab) feeding
// ldmatrix + mma.sync.m16n8k16 from XOR-swizzled shared memory; the epilogue stages the fp32
// accumulators through shared memory so each thread applies the epilogue to 8 consecutive
// elements of a row and stores them as one 16-byte vector. Runs on the GPU (sm_80+) and in the sim,
// whose tessel::ptx checks every fragment, address and cp.async wait.
//
// Requirements (the host side checks them): lda, ldb and the batch strides of A and B multiples of 8
// elements and A, B 16-byte aligned (cp.async moves 16-byte chunks; edges are zero-filled through
// src-size); C has any ldc and batch stride.
#pragma once

#include <cstdint>
#include <type_traits>

#include <tessel/core/kernel.hpp>
#include <tessel/core/tile_grid.hpp>
#include <tessel/kernels/gemm_epilogue.cuh>
#include <tessel/core/ptx.hpp>

namespace tessel::kernels {

// The shape of one mma_matmul instantiation: the block tile BM x BN, BK = 32 deep per pipeline
// stage, WarpsM x WarpsN warps each owning a (BM/WarpsM) x (BN/WarpsN) tile of C, Stages slabs in
// flight. smem_bytes() is the dynamic shared memory a launch needs.
template <int BM, int BN, int WarpsM, int WarpsN, int Stages>
struct MmaTile {
    static constexpr int bm = BM, bn = BN, bk = 32, stages = Stages;
    static constexpr int threads = WarpsM * WarpsN * 32;
    static constexpr int warps_m = WarpsM, warps_n = WarpsN;
    static constexpr int warp_m = BM / WarpsM, warp_n = BN / WarpsN;
    static constexpr int m_frags = warp_m / 16, n_frags = warp_n / 8;  // mma tiles per warp
    static_assert(warp_m % 16 == 0 && warp_n % 16 == 0, "a warp tile is a whole number of 16 x 16 tiles");
    static_assert(BN % 64 == 0, "B's swizzle permutes 8 chunks of a 64-wide row group");
    static_assert((BM * 4) % threads == 0 && (BN * 4) % threads == 0, "every thread loads whole chunks");
    static_assert(Stages >= 2 && Stages <= 6, "2 to 6 pipeline stages");
    static constexpr int a_chunks = BM * 4 / threads, b_chunks = BN * 4 / threads;  // 16-byte chunks per thread per stage
    static constexpr int stage_elems = BM * 32 + 32 * BN;
    static constexpr int c_stride = BN + 8;  // fp32 staging row: +8 floats keeps a half-warp's 8-byte stores on distinct banks
    static constexpr std::size_t smem_bytes() {
        const std::size_t pipe = std::size_t(Stages) * stage_elems * 2, stage_c = std::size_t(BM) * c_stride * 4;
        return pipe > stage_c ? pipe : stage_c;
    }
    static dim3 block() { return dim3(threads); }
    static dim3 grid(int m, int n, int batches = 1) { return tile_grid(m, n, batches, BM, BN); }
};


namespace mma_detail {

// Shared-memory element offsets of the 16-byte chunk `chunk` of row `row`, swizzled so that the 8
// rows an ldmatrix phase reads fall on 8 distinct 16-byte bank groups. A rows are 32 elements
// (4 chunks): chunk ^ ((row / 2) % 4). B rows are BN elements: the low 3 bits of the chunk ^ row % 8.
__device__ __forceinline__ int a_offset(int row, int chunk) { return row * 32 + ((chunk ^ ((row >> 1) & 3)) << 3); }
template <int BN>
__device__ __forceinline__ int b_offset(int row, int chunk) { return row * BN + ((chunk ^ (row & 7)) << 3); }

template <class T>
__device__ __forceinline__ float to_float(T x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
    else return __half2float(x);
}
template <class T>
__device__ __forceinline__ T from_float(float x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(x);
    else return __float2half(x);
}

// Bytes of a 16-byte chunk (8 elements) starting at element `first` that lie before `limit`.
__device__ __forceinline__ unsigned valid_bytes(int first, int limit) {
    const int n = limit - first;
    return n >= 8 ? 16u : n > 0 ? unsigned(n) * 2u : 0u;
}

}  // namespace mma_detail

// budget: threads 128, registers 255, hot
template <class T, class OutT, class Tile, bool BColumns = false, class Epilogue = GemmEpilogue<float, OutT>>
__global__ void __launch_bounds__(Tile::threads)
mma_matmul(int m, int n, int k, const T* __restrict__ a, int lda, std::int64_t batch_stride_a, const T* __restrict__ b, int ldb,
           std::int64_t batch_stride_b, OutT* c, int ldc, std::int64_t batch_stride_c, int batches, Epilogue epilogue) {
    static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "mma_matmul takes bf16 or fp16 inputs");
    using namespace mma_detail;
    constexpr int BM = Tile::bm, BN = Tile::bn, S = Tile::stages, NT = Tile::threads;
    constexpr int MF = Tile::m_frags, NF = Tile::n_frags;
    TESSEL_DYNAMIC_SHARED(T, smem);
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int warp_row = (warp / Tile::warps_n) * Tile::warp_m, warp_col = (warp % Tile::warps_n) * Tile::warp_n;
    const int col0 = int(blockIdx.x) * BN;
    const int k_tiles = (k + 31) / 32;

    for (int batch = int(blockIdx.z); batch < batches; batch += int(gridDim.z))
    for (std::int64_t first_row = std::int64_t(blockIdx.y) * BM; first_row < m; first_row += std::int64_t(gridDim.y) * BM) {
        const int row0 = int(first_row);
        const T* const a_batch = a + batch * batch_stride_a;
        const T* const b_batch = b + batch * batch_stride_b;
        OutT* const c_batch = c + batch * batch_stride_c;

        // Issues the copies of k-slab `kt` into stage `stage`; rows past M, columns past N and K
        // are zero-filled (src-size 0 reads nothing: the source is then the operand's base).
        auto load_slab = [&](int stage, int kt) {
            T* sa = smem + stage * Tile::stage_elems;
            T* sb = sa + BM * 32;
            const int k0 = kt * 32;
#pragma unroll
            for (int i = 0; i < Tile::a_chunks; ++i) {
                const int id = tid + i * NT, r = id >> 2, ch = id & 3;
                const unsigned bytes = row0 + r < m ? valid_bytes(k0 + ch * 8, k) : 0u;
                const T* src = bytes ? a_batch + std::size_t(row0 + r) * lda + k0 + ch * 8 : a_batch;
                ptx::cp_async_16(sa + a_offset(r, ch), src, bytes);
            }
#pragma unroll
            for (int i = 0; i < Tile::b_chunks; ++i) {
                if constexpr (BColumns) {  // B^T's rows (one per output column), staged like A's
                    const int id = tid + i * NT, r = id >> 2, ch = id & 3;
                    const unsigned bytes = col0 + r < n ? valid_bytes(k0 + ch * 8, k) : 0u;
                    const T* src = bytes ? b_batch + std::size_t(col0 + r) * ldb + k0 + ch * 8 : b_batch;
                    ptx::cp_async_16(sb + a_offset(r, ch), src, bytes);
                } else {
                    const int id = tid + i * NT, r = id / (BN / 8), ch = id % (BN / 8);
                    const unsigned bytes = k0 + r < k ? valid_bytes(col0 + ch * 8, n) : 0u;
                    const T* src = bytes ? b_batch + std::size_t(k0 + r) * ldb + col0 + ch * 8 : b_batch;
                    ptx::cp_async_16(sb + b_offset<BN>(r, ch), src, bytes);
                }
            }
        };

        float acc[MF][NF][4];
#pragma unroll
        for (int i = 0; i < MF; ++i)
#pragma unroll
            for (int j = 0; j < NF; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

        // Prologue: slabs 0 .. S-2 in flight, one group each (empty groups past the last slab keep
        // the group count, and so the wait below, the same in every iteration).
#pragma unroll
        for (int s = 0; s < S - 1; ++s) {
            if (s < k_tiles) load_slab(s, s);
            ptx::cp_async_commit();
        }

        for (int kt = 0; kt < k_tiles; ++kt) {
            ptx::cp_async_wait<S - 2>();  // slab kt has landed (for this thread's copies) ...
            __syncthreads();              // ... and everyone's; and stage (kt - 1) % S is no longer read
            if (kt + S - 1 < k_tiles) load_slab((kt + S - 1) % S, kt + S - 1);
            ptx::cp_async_commit();

            const T* sa = smem + (kt % S) * Tile::stage_elems;
            const T* sb = sa + BM * 32;
#pragma unroll
            for (int ks = 0; ks < 2; ++ks) {  // two k16 steps per slab
                std::uint32_t af[MF][4], bf[NF][2];
#pragma unroll
                for (int i = 0; i < MF; ++i) {
                    // Lanes 0-15 give rows 0-15 at k chunk 2ks, lanes 16-31 the same rows at 2ks + 1:
                    // the four 8x8 matrices are a0a1, a2a3, a4a5, a6a7 of the ISA's A fragment.
                    const int r = warp_row + i * 16 + (lane & 15);
                    ptx::ldmatrix<4>(af[i], sa + a_offset(r, ks * 2 + (lane >> 4)));
                }
#pragma unroll
                for (int j = 0; j < NF; j += 2) {
                    // Four 8x8 matrices: b0b1 and b2b3 of n-tile j, then of n-tile j + 1. k-major B is
                    // read transposed (.trans: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15),
                    // (k 8-15, n 8-15)); B by columns is read as rows of B^T ((n 0-7, k 0-7),
                    // (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)), as A is.
                    std::uint32_t r4[4];
                    if constexpr (BColumns) {
                        const int nr = warp_col + j * 8 + (lane & 7) + ((lane >> 4) << 3);
                        ptx::ldmatrix<4>(r4, sb + a_offset(nr, ks * 2 + ((lane >> 3) & 1)));
                    } else {
                        const int kr = ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7);
                        const int ch = (warp_col + j * 8) / 8 + (lane >> 4);
                        ptx::ldmatrix<4, true>(r4, sb + b_offset<BN>(kr, ch));
                    }
                    bf[j][0] = r4[0], bf[j][1] = r4[1], bf[j + 1][0] = r4[2], bf[j + 1][1] = r4[3];
                }
#pragma unroll
                for (int i = 0; i < MF; ++i)
#pragma unroll
                    for (int j = 0; j < NF; ++j) {
                        if constexpr (std::is_same_v<T, __nv_bfloat16>) ptx::mma_m16n8k16_bf16(acc[i][j], af[i], bf[j], acc[i][j]);
                        else ptx::mma_m16n8k16_f16(acc[i][j], af[i], bf[j], acc[i][j]);
                    }
            }
        }
        ptx::cp_async_wait<0>();  // only empty groups remain; the staging below reuses the pipeline's memory
        __syncthreads();

        // Epilogue, 1: accumulators to shared memory as fp32 rows (ISA C layout: c0,c1 in row
        // lane/4, columns 2(lane%4) + 0/1; c2,c3 eight rows below).
        float* sc = reinterpret_cast<float*>(smem);
#pragma unroll
        for (int i = 0; i < MF; ++i)
#pragma unroll
            for (int j = 0; j < NF; ++j) {
                const int r = warp_row + i * 16 + (lane >> 2), col = warp_col + j * 8 + (lane & 3) * 2;
                sc[r * Tile::c_stride + col] = acc[i][j][0];
                sc[r * Tile::c_stride + col + 1] = acc[i][j][1];
                sc[(r + 8) * Tile::c_stride + col] = acc[i][j][2];
                sc[(r + 8) * Tile::c_stride + col + 1] = acc[i][j][3];
            }
        __syncthreads();

        // 2: each thread takes 8 consecutive elements of a row: epilogue, conversion, one 16-byte
        // store where the row allows (else element by element).
        constexpr int chunks_per_row = BN / 8;
        for (int id = tid; id < BM * chunks_per_row; id += NT) {
            const int r = id / chunks_per_row, cc = (id % chunks_per_row) * 8;
            const int gr = row0 + r, gc = col0 + cc;
            if (gr >= m || gc >= n) continue;
            OutT* dst = c_batch + std::size_t(gr) * ldc + gc;
            const float* v = sc + r * Tile::c_stride + cc;
            const bool full = gc + 8 <= n;
            alignas(16) OutT out[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) {  // columns past N are not stored, nor given to the epilogue
                const bool inside = full || gc + e < n;
                const float prior = epilogue.reads_prior() && inside ? to_float(dst[e]) : 0.f;
                out[e] = inside ? from_float<OutT>(epilogue(v[e], prior, batch, gr, gc + e)) : OutT{};
            }
            if (full && (reinterpret_cast<std::uintptr_t>(dst) % 16) == 0) {
                constexpr int vecs = int(sizeof(OutT) * 8 / 16);
#pragma unroll
                for (int q = 0; q < vecs; ++q) reinterpret_cast<uint4*>(dst)[q] = reinterpret_cast<const uint4*>(out)[q];
            } else {
                for (int e = 0; e < 8 && gc + e < n; ++e) dst[e] = out[e];
            }
        }
        __syncthreads();  // the next row tile's prologue overwrites the staging area
    }
}

}  // namespace tessel::kernels
