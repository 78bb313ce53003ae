// Tensor-core matrix product with mma.sync: bf16 and fp16 inputs (m16n8k16, fp32 accumulate), fp32
// inputs on TF32 tensor cores (m16n8k8, rounded with cvt.rna, fp32 accumulate) and int8 inputs
// (m16n8k32, int32 accumulate): C = epilogue(A * B, C), A row-major [M][K], B row-major [K][N] (16-bit
// inputs only) or stored by columns (BColumns: B^T row-major [N][K], as a linear layer's weight;
// required for tf32 and int8, whose ldmatrix cannot transpose), C row-major [M][N], any M, N, K, for
// `batches` such products whose operands are batch strides apart (0 broadcasts one operand).
// The main loop is a Stages-deep cp.async pipeline (one barrier per 64-byte-deep slab: 32 bf16, 16
// fp32 or 64 int8 elements of K; the steps that copy a whole slab of K run in a loop of their own,
// without K's edge arithmetic) feeding ldmatrix + mma.sync from XOR-swizzled shared memory: every
// input type moves the same bytes, so the staging, swizzle and fragment addressing are shared (the
// ISA's A and B fragments of all three shapes give a lane the same 4 bytes of the same row). The
// epilogue stages the accumulators (fp32 or int32) through shared memory so each thread applies the
// epilogue to 8 consecutive elements of a row and stores them as one vector. Runs on the GPU (sm_80+)
// and in the sim, whose tessel::ptx checks every fragment, address and cp.async wait. Blocks take
// their tiles in grouped order (grouped_tile), for L2 reuse between the blocks resident at once.
//
// Requirements (the host side checks them): lda, ldb and the batch strides of A and B multiples of 16
// bytes and A, B 16-byte aligned (cp.async moves 16-byte chunks; edges are zero-filled through
// src-size); C has any ldc and batch stride.
#pragma once

#include <cstdint>
#include <type_traits>

#include <tessel/core/kernel.hpp>
#include <tessel/core/tile_grid.hpp>
#include <tessel/kernels/gemm_epilogue.cuh>
#include <tessel/core/ptx.hpp>

namespace tessel::kernels {

// The shape of one mma_matmul instantiation: the block tile BM x BN, 64 bytes of K per pipeline
// stage, WarpsM x WarpsN warps each owning a (BM/WarpsM) x (BN/WarpsN) tile of C, Stages slabs in
// flight. smem_bytes() is the dynamic shared memory a launch needs (for any input type).
template <int BM, int BN, int WarpsM, int WarpsN, int Stages>
struct MmaTile {
    static constexpr int bm = BM, bn = BN, bk_bytes = 64, stages = Stages;
    static constexpr int threads = WarpsM * WarpsN * 32;
    // Blocks per multiprocessor the register allocation must allow: 4 (128 registers) for warp tiles
    // of at most 32 accumulators per thread, which ptxas otherwise squeezed to 80 registers with
    // spills (sm_90, CUDA 13); 1 for larger tiles, which need about 210.
    static constexpr int min_blocks = BM * BN / threads <= 32 ? 4 : 1;
    static constexpr int warps_m = WarpsM, warps_n = WarpsN;
    static constexpr int warp_m = BM / WarpsM, warp_n = BN / WarpsN;
    static constexpr int m_frags = warp_m / 16, n_frags = warp_n / 8;  // mma tiles per warp
    static_assert(warp_m % 16 == 0 && warp_n % 16 == 0, "a warp tile is a whole number of 16 x 16 tiles");
    static_assert(BN % 64 == 0, "B's swizzle permutes 8 chunks of a 64-wide row group");
    static_assert((BM * 4) % threads == 0 && (BN * 4) % threads == 0, "every thread loads whole chunks");
    static_assert(Stages >= 2 && Stages <= 6, "2 to 6 pipeline stages");
    static constexpr int a_chunks = BM * 4 / threads, b_chunks = BN * 4 / threads;  // 16-byte chunks per thread per stage
    static constexpr int stage_bytes = (BM + BN) * 64;  // A's BM rows and B's 64 bytes of K across BN columns
    static constexpr int c_stride = BN + 8;  // 4-byte staging row: +8 words keeps a half-warp's 8-byte stores on distinct banks
    static constexpr std::size_t smem_bytes() {
        const std::size_t pipe = std::size_t(Stages) * stage_bytes, stage_c = std::size_t(BM) * c_stride * 4;
        return pipe > stage_c ? pipe : stage_c;
    }
    static dim3 block() { return dim3(threads); }
    static dim3 grid(int m, int n, int batches = 1) { return tile_grid(m, n, batches, BM, BN); }
};


namespace mma_detail {

// Shared-memory byte offsets of the 16-byte chunk `chunk` of row `row`, swizzled so that the 8 rows
// an ldmatrix phase reads fall on 8 distinct 16-byte bank groups. A rows (and B^T rows) are 64 bytes
// (4 chunks): chunk ^ ((row / 2) % 4). k-major B rows are BN 16-bit elements: the low 3 bits of the
// chunk ^ row % 8.
__device__ __forceinline__ int a_offset(int row, int chunk) { return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4); }
template <int BN>
__device__ __forceinline__ int b_offset(int row, int chunk) { return row * BN * 2 + ((chunk ^ (row & 7)) << 4); }

// Per input type: the accumulator and one mma over 32 bytes of K (k16 for 16-bit, k8 for tf32, k32
// for int8), its fragments as ldmatrix left them.
template <class T>
struct MmaInput {
    using acc = float;
    __device__ __forceinline__ static void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
        if constexpr (std::is_same_v<T, __nv_bfloat16>) ptx::mma_m16n8k16_bf16(d, a, b, d);
        else ptx::mma_m16n8k16_f16(d, a, b, d);
    }
};
template <>
struct MmaInput<float> {
    using acc = float;
    // The fragments hold fp32 bits; the tensor cores would truncate them, cvt.rna rounds (as cuBLAS's TF32).
    __device__ __forceinline__ static void mma(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
        std::uint32_t ra[4], rb[2];
#pragma unroll
        for (int q = 0; q < 4; ++q) ra[q] = ptx::cvt_rna_tf32(__uint_as_float(a[q]));
#pragma unroll
        for (int q = 0; q < 2; ++q) rb[q] = ptx::cvt_rna_tf32(__uint_as_float(b[q]));
        ptx::mma_m16n8k8_tf32(d, ra, rb, d);
    }
};
template <>
struct MmaInput<std::int8_t> {
    using acc = int;
    __device__ __forceinline__ static void mma(int (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
        ptx::mma_m16n8k32_s8(d, a, b, d);
    }
};

// Bytes of a 16-byte chunk starting at element `first` that lie before `limit`.
template <class T>
__device__ __forceinline__ unsigned valid_bytes(int first, int limit) {
    constexpr int per_chunk = int(16 / sizeof(T));
    const int n = limit - first;
    return n >= per_chunk ? 16u : n > 0 ? unsigned(n * int(sizeof(T))) : 0u;
}

}  // namespace mma_detail

// budget: threads 128, registers 255, hot, mainloop 6
template <class T, class OutT, class Tile, bool BColumns = false, class Epilogue = GemmEpilogue<float, OutT>>
__global__ void __launch_bounds__(Tile::threads, Tile::min_blocks)
mma_matmul(int m, int n, int k, const T* __restrict__ a, int lda, std::int64_t batch_stride_a, const T* __restrict__ b, int ldb,
           std::int64_t batch_stride_b, OutT* c, int ldc, std::int64_t batch_stride_c, int batches, Epilogue epilogue) {
    static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half> || std::is_same_v<T, float> ||
                      std::is_same_v<T, std::int8_t>,
                  "mma_matmul takes bf16, fp16, fp32 (as tf32) or int8 inputs");
    static_assert(BColumns || sizeof(T) == 2, "tf32 and int8 take B by columns (ldmatrix.trans moves 16-bit elements only)");
    using namespace mma_detail;
    using Acc = typename MmaInput<T>::acc;
    using EpAcc = typename Epilogue::acc_type;
    constexpr int BM = Tile::bm, BN = Tile::bn, S = Tile::stages, NT = Tile::threads;
    constexpr int MF = Tile::m_frags, NF = Tile::n_frags;
    constexpr int BK = int(64 / sizeof(T)), CH = int(16 / sizeof(T));  // elements per slab and per 16-byte chunk
    // Rows between a thread's chunks of one stage: 64-byte rows of A and B^T (4 chunks each), and
    // k-major B's rows of BN / 8 chunks. Multiples of 8 keep the swizzle key (row / 2 % 4, row % 8).
    constexpr int RA = NT / 4, RB = BColumns ? 8 : NT / (BN / 8);
    static_assert(RA % 8 == 0 && NT % (BN / 8) == 0 && RB % 8 == 0, "a thread's chunks keep their swizzle key");
    TESSEL_DYNAMIC_SHARED(unsigned char, smem);
    const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
    const int warp_row = (warp / Tile::warps_n) * Tile::warp_m, warp_col = (warp % Tile::warps_n) * Tile::warp_n;
    const GridTile tile = grouped_tile(blockIdx.x, blockIdx.y, gridDim.x, gridDim.y, tile_group_rows);
    const int col0 = tile.col * BN;
    const int k_tiles = k / BK + (k % BK != 0);  // not (k + BK - 1) / BK: it overflows for k near 2^31

    for (int batch = int(blockIdx.z); batch < batches; batch += int(gridDim.z))
    for (std::int64_t first_row = std::int64_t(tile.row) * BM; first_row < m; first_row += std::int64_t(gridDim.y) * BM) {
        const int row0 = int(first_row);
        const T* const a_batch = a + batch * batch_stride_a;
        const T* const b_batch = b + batch * batch_stride_b;
        OutT* const c_batch = c + batch * batch_stride_c;

        // Issues the copies of k-slab `kt` into stage `stage`; rows past M, columns past N and K
        // are zero-filled (src-size 0 reads nothing: the source is then the operand's base). What
        // does not change along K is worked out here, once per tile: a thread's chunks of one stage
        // lie a fixed number of rows apart (RA for A and B^T, RB for k-major B), which keeps their
        // swizzle key, so chunk i's shared offset is the first one's plus a constant; its column
        // chunk is the same for every i, so K's edge gives every A chunk the same byte count.
        const int a_ch = tid & 3, a_row = tid >> 2;
        const T* const a_first = a_batch + std::int64_t(row0 + a_row) * lda + a_ch * CH;
        const std::int64_t a_step = std::int64_t(RA) * lda;
        unsigned a_rows = 0;  // bit i: chunk i's row lies inside M
#pragma unroll
        for (int i = 0; i < Tile::a_chunks; ++i) a_rows |= unsigned(row0 + a_row + i * RA < m) << i;
        const int b_ch = BColumns ? tid & 3 : tid % (BN / 8), b_row = BColumns ? tid >> 2 : tid / (BN / 8);
        const T* const b_first = BColumns ? b_batch + std::int64_t(col0 + b_row) * ldb + b_ch * CH
                                          : b_batch + std::int64_t(b_row) * ldb + col0 + b_ch * 8;
        const std::int64_t b_step = std::int64_t(BColumns ? RA : RB) * ldb;
        unsigned b_rows = 0;  // B by columns: bit i, chunk i's column lies inside N
        unsigned b_col_bytes = 0;  // k-major B: the bytes of this thread's column chunk inside N
        if constexpr (BColumns) {
#pragma unroll
            for (int i = 0; i < Tile::b_chunks; ++i) b_rows |= unsigned(col0 + b_row + i * RA < n) << i;
        } else {
            b_col_bytes = valid_bytes<T>(col0 + b_ch * 8, n);
        }
        // Slab kt into stage `stage`. `whole` (std::true_type): the slab lies inside K (every slab
        // but a last partial one), so its copies are 16 bytes or none and need no K predicate and
        // no zero-fill arithmetic.
        auto load_slab = [&](int stage, int kt, auto whole) {
            unsigned char* sa = smem + stage * Tile::stage_bytes;
            const int k0 = kt * BK;
            auto k_bytes = [&](int ch) {  // the bytes of column chunk ch inside K
                if constexpr (decltype(whole)::value) return 16u;
                else return valid_bytes<T>(k0 + ch * CH, k);
            };
            // An operand of 64-byte rows (A, and B by columns): chunk i of this thread's `rows`
            // (bit i: inside M or N), `step` elements after the previous one.
            auto copy_rows = [&](unsigned char* to, const T* first, std::int64_t step, unsigned rows, unsigned bytes_in_k, const T* base,
                                 int row, int ch, auto chunks) {
#pragma unroll
                for (int i = 0; i < decltype(chunks)::value; ++i) {
                    const unsigned bytes = (rows >> i) & 1u ? bytes_in_k : 0u;
                    const T* src = bytes ? first + k0 + i * step : base;
                    ptx::cp_async_16(to + a_offset(row, ch) + i * RA * 64, src, bytes);
                }
            };
            unsigned char* sb = sa + BM * 64;
            copy_rows(sa, a_first, a_step, a_rows, k_bytes(a_ch), a_batch, a_row, a_ch, std::integral_constant<int, Tile::a_chunks>{});
            if constexpr (BColumns) {  // B^T's rows (one per output column), staged like A's
                copy_rows(sb, b_first, b_step, b_rows, k_bytes(b_ch), b_batch, b_row, b_ch, std::integral_constant<int, Tile::b_chunks>{});
            } else {
                const T* const b_slab = b_first + std::int64_t(k0) * ldb;
#pragma unroll
                for (int i = 0; i < Tile::b_chunks; ++i) {
                    const unsigned bytes = decltype(whole)::value || k0 + b_row + i * RB < k ? b_col_bytes : 0u;
                    const T* src = bytes ? b_slab + i * b_step : b_batch;
                    ptx::cp_async_16(sb + b_offset<BN>(b_row, b_ch) + i * RB * BN * 2, src, bytes);
                }
            }
        };

        Acc acc[MF][NF][4];
#pragma unroll
        for (int i = 0; i < MF; ++i)
#pragma unroll
            for (int j = 0; j < NF; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = Acc(0);

        // Prologue: slabs 0 .. S-2 in flight, one group each (empty groups past the last slab keep
        // the group count, and so the wait below, the same in every iteration).
#pragma unroll
        for (int s = 0; s < S - 1; ++s) {
            if (s < k_tiles) load_slab(s, s, std::false_type{});
            ptx::cp_async_commit();
        }

        // One main-loop step: wait for slab kt, issue slab kt + S - 1, multiply slab kt. The steps
        // whose new slab is a whole slab of K run first, in a loop of their own without K's
        // zero-fill arithmetic; the last S - 1 steps (the new slab partial, or past K) after it.
        auto step = [&](int kt, auto whole) {
            ptx::cp_async_wait<S - 2>();  // slab kt has landed (for this thread's copies) ...
            __syncthreads();              // ... and everyone's; and stage (kt - 1) % S is no longer read
            if (const int next = kt + S - 1; decltype(whole)::value || next < k_tiles) load_slab(next % S, next, whole);
            ptx::cp_async_commit();

            const unsigned char* sa = smem + (kt % S) * Tile::stage_bytes;
            const unsigned char* sb = sa + BM * 64;
#pragma unroll
            for (int ks = 0; ks < 2; ++ks) {  // two 32-byte mma steps per slab
                std::uint32_t af[MF][4], bf[NF][2];
#pragma unroll
                for (int i = 0; i < MF; ++i) {
                    // Lanes 0-15 give rows 0-15 at chunk 2ks, lanes 16-31 the same rows at 2ks + 1:
                    // the four 8x8 (16-byte) matrices are a0..a3 of the ISA's A fragment (for 16-bit
                    // inputs a0a1, a2a3, a4a5, a6a7).
                    const int r = warp_row + i * 16 + (lane & 15);
                    ptx::ldmatrix<4>(af[i], sa + a_offset(r, ks * 2 + (lane >> 4)));
                }
#pragma unroll
                for (int j = 0; j < NF; j += 2) {
                    // Four 8x8 matrices: b0 and b1 of n-tile j, then of n-tile j + 1. k-major B is
                    // read transposed (.trans: matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15),
                    // (k 8-15, n 8-15)); B by columns is read as rows of B^T ((n 0-7, chunk 0),
                    // (n 0-7, chunk 1), (n 8-15, chunk 0), (n 8-15, chunk 1)), as A is.
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
                    for (int j = 0; j < NF; ++j) MmaInput<T>::mma(acc[i][j], af[i], bf[j]);
            }
        };
        const int whole_steps = k / BK - (S - 1);  // steps whose new slab, kt + S - 1, ends inside K
        int kt = 0;
        for (; kt < whole_steps; ++kt) step(kt, std::true_type{});
        for (; kt < k_tiles; ++kt) step(kt, std::false_type{});
        ptx::cp_async_wait<0>();  // only empty groups remain; the staging below reuses the pipeline's memory
        __syncthreads();

        // Epilogue, 1: accumulators to shared memory as rows (ISA C layout, the same for all three
        // shapes: c0,c1 in row lane/4, columns 2(lane%4) + 0/1; c2,c3 eight rows below).
        Acc* sc = reinterpret_cast<Acc*>(smem);
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

        // 2: each thread takes 8 consecutive elements of a row: epilogue, conversion, one vector store
        // (16 bytes, or 8 for an int8 output) where the row allows, else element by element.
        constexpr int chunks_per_row = BN / 8;
        constexpr int out_bytes = int(sizeof(OutT)) * 8;
        using Vec = std::conditional_t<out_bytes % 16 == 0, uint4, uint2>;
        for (int id = tid; id < BM * chunks_per_row; id += NT) {
            const int r = id / chunks_per_row, cc = (id % chunks_per_row) * 8;
            const int gr = row0 + r, gc = col0 + cc;
            if (gr >= m || gc >= n) continue;
            OutT* dst = c_batch + std::size_t(gr) * ldc + gc;
            const Acc* v = sc + r * Tile::c_stride + cc;
            const bool full = gc <= n - 8;  // not gc + 8 <= n: that overflows for n within 8 of 2^31
            alignas(16) OutT out[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) {  // columns past N are not stored, nor given to the epilogue
                const bool inside = full || gc + e < n;
                const EpAcc prior = epilogue.reads_prior() && inside ? Epilogue::to_acc(dst[e]) : EpAcc(0);
                out[e] = inside ? Epilogue::to_out(epilogue(EpAcc(v[e]), prior, batch, gr, gc + e)) : OutT{};
            }
            if (full && (reinterpret_cast<std::uintptr_t>(dst) % sizeof(Vec)) == 0) {
#pragma unroll
                for (int q = 0; q < out_bytes / int(sizeof(Vec)); ++q) reinterpret_cast<Vec*>(dst)[q] = reinterpret_cast<const Vec*>(out)[q];
            } else {
                for (int e = 0; e < 8 && gc + e < n; ++e) dst[e] = out[e];
            }
        }
        __syncthreads();  // the next row tile's prologue overwrites the staging area
    }
}

}  // namespace tessel::kernels
