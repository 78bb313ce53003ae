// The warp-level matrix instructions in the sim, with the semantics and fragment layouts of the
// PTX ISA (section 9.7.14, "Warp-level matrix multiply-accumulate instructions"; 9.7.9.25 cp.async;
// 9.7.14.5.15 ldmatrix). tessel::ptx (core/ptx.hpp) calls these on the sim and the inline PTX on
// CUDA. The sim is strict where hardware is undefined or punishes: a partial warp, lanes at
// different instructions, misaligned or non-shared addresses fault with the source line, and a
// cp.async destination reads as poison (0xFF bytes) until a wait covers its group.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <source_location>
#include <stdexcept>
#include <string>

#include "block_exec.hpp"
#include "runtime.hpp"  // count_ldmatrix
#include "sync.hpp"

namespace tessel::sim::warp {

// ---- element conversions (exact, as the tensor cores read their inputs) ------------------------
inline float bf16_bits_to_float(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }
inline float f16_bits_to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h >> 15) << 31;
    const int exp = (h >> 10) & 0x1f;
    std::uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN
    if (exp != 0) return std::bit_cast<float>(sign | (std::uint32_t(exp - 15 + 127) << 23) | (mant << 13));
    if (mant == 0) return std::bit_cast<float>(sign);
    int e = -14;  // subnormal: normalise
    while (!(mant & 0x400u)) mant <<= 1, --e;
    return std::bit_cast<float>(sign | (std::uint32_t(e + 127) << 23) | ((mant & 0x3ffu) << 13));
}
// A .tf32 operand: the tensor cores use the sign, exponent and top 10 mantissa bits; the 13 low
// bits of the 32-bit register are not read (a kernel rounds first with cvt.rna.tf32.f32), whatever
// the exponent: a NaN whose payload lies only in those bits reads as an infinity, as on sm_90.
inline float tf32_bits_to_float(std::uint32_t x) { return std::bit_cast<float>(x & 0xffffe000u); }
// cvt.rna.tf32.f32: round to nearest, ties away from zero, to 10 mantissa bits.
// Infinities and NaNs are not rounded but still truncated, as ptxas compiles it for sm_90 (FSETP
// |x| >= inf around the add, then the mask on every input): a NaN whose payload lies only in the
// 13 low bits becomes an infinity (the tf32 layout is implementation defined, PTX ISA 5.2.3).
inline std::uint32_t cvt_rna_tf32(float f) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    return ((x & 0x7f800000u) == 0x7f800000u ? x : x + 0x1000u) & 0xffffe000u;
}

inline std::uint16_t half_of(std::uint32_t reg, int i) { return std::uint16_t(reg >> (16 * i)); }
inline std::int8_t byte_of(std::uint32_t reg, int i) { return std::int8_t(std::uint8_t(reg >> (8 * i))); }

// ---- fragment layouts (PTX ISA 9.7.14.5.7 m16n8k8, 9.7.14.5.8 m16n8k16, 9.7.14.5.10 m16n8k32) ----
// groupID = lane / 4, threadID_in_group = lane % 4. Every operand is made of 8-row tiles in which
// each row is 4 lanes' 32-bit registers; the functions give the matrix coordinate of element `i`
// of a lane's fragment, numbered as the ISA numbers them (a0, a1, ... in register order).
struct RowCol {
    int row, col;
};
// C and D (16 x 8, 32-bit elements), every shape: c0,c1 in row groupID, c2,c3 in row groupID + 8.
inline RowCol acc_element(int lane, int i) { return {lane / 4 + 8 * (i / 2), (lane % 4) * 2 + (i & 1)}; }
// A of m16n8k16 .f16/.bf16 (16 x 16): a0..a7, two per register.
inline RowCol a_element_k16(int lane, int i) {
    return {lane / 4 + ((i / 2) % 2) * 8, (lane % 4) * 2 + (i & 1) + (i / 4) * 8};
}
// B of m16n8k16 (16 x 8, k x n): b0..b3, two per register.
inline RowCol b_element_k16(int lane, int i) { return {(lane % 4) * 2 + (i & 1) + (i / 2) * 8, lane / 4}; }
// A of m16n8k8 .tf32 (16 x 8): a0..a3, one per register.
inline RowCol a_element_tf32(int lane, int i) { return {lane / 4 + (i % 2) * 8, lane % 4 + (i / 2) * 4}; }
// B of m16n8k8 .tf32 (8 x 8): b0, b1.
inline RowCol b_element_tf32(int lane, int i) { return {lane % 4 + i * 4, lane / 4}; }
// A of m16n8k32 .s8 (16 x 32): a0..a15, four per register.
inline RowCol a_element_k32(int lane, int i) {
    return {lane / 4 + ((i / 4) % 2) * 8, (lane % 4) * 4 + (i & 3) + (i / 8) * 16};
}
// B of m16n8k32 .s8 (32 x 8): b0..b7, four per register.
inline RowCol b_element_k32(int lane, int i) { return {(lane % 4) * 4 + (i & 3) + (i / 4) * 16, lane / 4}; }

// ---- mma.sync ---------------------------------------------------------------------------------
enum class MmaKind { f16_k16, bf16_k16, tf32_k8, s8_k32 };

// One lane's operands of an mma.sync: A, B and C registers in, D registers out.
struct MmaLane : WarpMatrixOp {
    std::uint32_t a[4]{}, b[2]{}, c[4]{}, d[4]{};
};

template <MmaKind Kind>
void mma_compute(WarpMatrixOp* const* ops) {
    constexpr int K = Kind == MmaKind::tf32_k8 ? 8 : Kind == MmaKind::s8_k32 ? 32 : 16;
    auto lane = [&](int l) -> MmaLane& { return *static_cast<MmaLane*>(ops[l]); };
    // Gather the whole warp's fragments into matrices, as the ISA's tables place them.
    double a[16][32], b[32][8];
    for (int l = 0; l < 32; ++l) {
        const MmaLane& x = lane(l);
        if constexpr (Kind == MmaKind::tf32_k8) {
            for (int i = 0; i < 4; ++i) a[a_element_tf32(l, i).row][a_element_tf32(l, i).col] = tf32_bits_to_float(x.a[i]);
            for (int i = 0; i < 2; ++i) b[b_element_tf32(l, i).row][b_element_tf32(l, i).col] = tf32_bits_to_float(x.b[i]);
        } else if constexpr (Kind == MmaKind::s8_k32) {
            for (int i = 0; i < 16; ++i) a[a_element_k32(l, i).row][a_element_k32(l, i).col] = byte_of(x.a[i / 4], i % 4);
            for (int i = 0; i < 8; ++i) b[b_element_k32(l, i).row][b_element_k32(l, i).col] = byte_of(x.b[i / 4], i % 4);
        } else {
            auto cvt = [](std::uint16_t h) {
                return Kind == MmaKind::bf16_k16 ? bf16_bits_to_float(h) : f16_bits_to_float(h);
            };
            for (int i = 0; i < 8; ++i) a[a_element_k16(l, i).row][a_element_k16(l, i).col] = cvt(half_of(x.a[i / 2], i % 2));
            for (int i = 0; i < 4; ++i) b[b_element_k16(l, i).row][b_element_k16(l, i).col] = cvt(half_of(x.b[i / 2], i % 2));
        }
    }
    for (int l = 0; l < 32; ++l) {
        MmaLane& x = lane(l);
        for (int i = 0; i < 4; ++i) {
            const RowCol e = acc_element(l, i);
            if constexpr (Kind == MmaKind::s8_k32) {
                // Integer products are exact; the 32-bit accumulator wraps (no .satfinite).
                std::int64_t s = std::int32_t(x.c[i]);
                for (int k = 0; k < K; ++k) s += std::int64_t(a[e.row][k]) * std::int64_t(b[k][e.col]);
                x.d[i] = std::uint32_t(s);
            } else {
                // Products of 16-bit and tf32 inputs are exact in fp32; the sum is taken in double and
                // rounded once, at least as accurate as the hardware's fp32 accumulation.
                double s = double(std::bit_cast<float>(x.c[i]));
                for (int k = 0; k < K; ++k) s += a[e.row][k] * b[k][e.col];
                x.d[i] = std::bit_cast<std::uint32_t>(float(s));
            }
        }
    }
}

template <MmaKind Kind>
inline const char* mma_name() {
    switch (Kind) {
        case MmaKind::f16_k16: return "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32";
        case MmaKind::bf16_k16: return "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32";
        case MmaKind::tf32_k8: return "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32";
        case MmaKind::s8_k32: return "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32";
    }
    return "mma.sync";
}

// Runs one lane's part of an mma.sync: waits for the warp, returns with this lane's D.
template <MmaKind Kind>
void mma(std::uint32_t (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2], const std::uint32_t (&c)[4],
         const std::source_location& where) {
    MmaLane op;
    op.name = mma_name<Kind>();
    op.compute = &mma_compute<Kind>;
    std::memcpy(op.a, a, sizeof op.a);
    std::memcpy(op.b, b, sizeof op.b);
    std::memcpy(op.c, c, sizeof op.c);
    SimThread& t = *detail::tl_thread;
    t.kind = SyncKind::warp_matrix;
    t.site = where;
    t.mask = 0xffffffffu;
    t.value = reinterpret_cast<std::uintptr_t>(static_cast<WarpMatrixOp*>(&op));
    detail::tl_block->exec->synchronize(t);
    std::memcpy(d, op.d, sizeof op.d);
}

// ---- shared-memory addresses ------------------------------------------------------------------
// Whether [p, p + bytes) lies in the running block's dynamic shared memory. The sim checks the
// shared-memory operands of these instructions against it (static __shared__ arrays live in the
// worker thread's storage, where the sim cannot tell them from other memory): kernels that use
// ldmatrix or cp.async stage their tiles in dynamic shared memory (TESSEL_DYNAMIC_SHARED).
inline bool in_dynamic_smem(const void* p, std::size_t bytes) {
    const BlockContext* b = detail::tl_block;
    const auto* q = static_cast<const unsigned char*>(p);
    return b->dynamic_smem && q >= b->dynamic_smem && q + bytes <= b->dynamic_smem + b->dynamic_smem_bytes;
}

inline std::string address_text(const void* p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", p);
    return buf;
}

// ---- ldmatrix ---------------------------------------------------------------------------------
// One lane's ldmatrix: the row address it supplies, and the registers it receives.
struct LdmatrixLane : WarpMatrixOp {
    const unsigned char* row = nullptr;
    int lane = 0;
    std::uint32_t r[4]{};
};

// The wavefronts one matrix's read takes (sim::LdmatrixTraffic): the most distinct 4-byte words
// any bank holds among its eight 16-byte rows, at their offsets in dynamic shared memory (whose
// base a GPU aligns to at least 128 bytes, so offsets give the banks).
inline int ldmatrix_wavefronts(const std::size_t (&row_offset)[8]) {
    std::size_t words[32];
    int distinct = 0;
    for (int r = 0; r < 8; ++r)
        for (std::size_t w = row_offset[r] / 4; w < row_offset[r] / 4 + 4; ++w)
            if (std::find(words, words + distinct, w) == words + distinct) words[distinct++] = w;
    int per_bank[32] = {};
    for (int i = 0; i < distinct; ++i) ++per_bank[words[i] % 32];
    return *std::max_element(per_bank, per_bank + 32);
}

// ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 (PTX ISA 9.7.14.5.15): lanes 8j..8j+7 give the
// addresses of rows 0..7 of matrix j (16 bytes each, 16-byte aligned, in shared memory). Lane l
// receives in register j the elements (l/4, 2(l%4)) and (l/4, 2(l%4)+1) of matrix j, the first in
// the low half; with .trans, the elements (2(l%4), l/4) and (2(l%4)+1, l/4).
template <int N, bool Trans>
void ldmatrix_compute(WarpMatrixOp* const* ops) {
    std::uint16_t m[4][8][8];
    std::uint64_t wavefronts = 0;
    for (int j = 0; j < N; ++j) {
        std::size_t offsets[8];
        for (int r = 0; r < 8; ++r) {
            const auto& src = *static_cast<LdmatrixLane*>(ops[8 * j + r]);
            if (reinterpret_cast<std::uintptr_t>(src.row) % 16 != 0)
                throw std::invalid_argument("lane " + std::to_string(8 * j + r) + " gives row address " + address_text(src.row) +
                                            ", which is not 16-byte aligned");
            if (!in_dynamic_smem(src.row, 16))
                throw std::invalid_argument("lane " + std::to_string(8 * j + r) + " gives row address " + address_text(src.row) +
                                            ", whose 16 bytes are not in the block's dynamic shared memory");
            std::memcpy(m[j][r], src.row, 16);
            offsets[r] = std::size_t(src.row - detail::tl_block->dynamic_smem);
        }
        wavefronts += std::uint64_t(ldmatrix_wavefronts(offsets));
    }
    count_ldmatrix(std::uint64_t(N), wavefronts);
    for (int l = 0; l < 32; ++l) {
        auto& x = *static_cast<LdmatrixLane*>(ops[l]);
        for (int j = 0; j < N; ++j) {
            const std::uint16_t lo = Trans ? m[j][2 * (l % 4)][l / 4] : m[j][l / 4][2 * (l % 4)];
            const std::uint16_t hi = Trans ? m[j][2 * (l % 4) + 1][l / 4] : m[j][l / 4][2 * (l % 4) + 1];
            x.r[j] = std::uint32_t(lo) | (std::uint32_t(hi) << 16);
        }
    }
}

template <int N, bool Trans>
void ldmatrix(std::uint32_t (&r)[N], const void* row, const std::source_location& where) {
    static constexpr const char* names[2][3] = {
        {"ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x4.shared.b16"},
        {"ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
         "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"}};
    LdmatrixLane op;
    op.name = names[Trans][N == 1 ? 0 : N == 2 ? 1 : 2];
    op.compute = &ldmatrix_compute<N, Trans>;
    op.row = static_cast<const unsigned char*>(row);
    SimThread& t = *detail::tl_thread;
    op.lane = int(t.lane);
    t.kind = SyncKind::warp_matrix;
    t.site = where;
    t.mask = 0xffffffffu;
    t.value = reinterpret_cast<std::uintptr_t>(static_cast<WarpMatrixOp*>(&op));
    detail::tl_block->exec->synchronize(t);
    std::memcpy(r, op.r, sizeof r);
}

// ---- cp.async (PTX ISA 9.7.9.25.3) --------------------------------------------------------------
[[noreturn]] inline void async_fault(const std::source_location& where, const std::string& what) {
    const SimThread& t = *detail::tl_thread;
    const BlockContext& b = *detail::tl_block;
    throw KernelFault("sim: block (" + std::to_string(b.block_idx.x) + "," + std::to_string(b.block_idx.y) + "," +
                      std::to_string(b.block_idx.z) + "), thread " + std::to_string(t.tid) + ": " + what + " at " +
                      site_text(where));
}

// cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes: copies `bytes` (4, 8 or 16) from
// global to shared memory asynchronously; bytes past `src_bytes` are zero-filled and not read. The
// destination reads as poison until a cp.async.wait_group (or wait_all) covers the copy's group.
inline void cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes, const std::source_location& where) {
    const char* name = bytes == 16 ? "cp.async 16" : bytes == 8 ? "cp.async 8" : "cp.async 4";
    if (reinterpret_cast<std::uintptr_t>(dst) % bytes != 0 || reinterpret_cast<std::uintptr_t>(src) % bytes != 0)
        async_fault(where, std::string(name) + " with destination " + address_text(dst) + " and source " + address_text(src) +
                               ": both must be aligned to " + std::to_string(bytes) + " bytes");
    if (!in_dynamic_smem(dst, bytes))
        async_fault(where, std::string(name) + ": destination " + address_text(dst) +
                               " is not in the block's dynamic shared memory");
    if (src_bytes > bytes) async_fault(where, std::string(name) + ": src-size " + std::to_string(src_bytes) + " exceeds the copy size");
    if (src_bytes > 0 && in_dynamic_smem(src, src_bytes))
        async_fault(where, std::string(name) + ": source " + address_text(src) + " is in shared memory, not global memory");
    AsyncCopy c;
    c.dst = static_cast<unsigned char*>(dst);
    c.bytes = bytes;
    if (src_bytes) std::memcpy(c.data, src, src_bytes);  // the global read (AddressSanitizer checks it here)
    std::memset(c.dst, 0xFF, bytes);                        // not valid until waited for
    detail::tl_thread->async_copies.push_back(c);
}

// cp.async.commit_group: the copies issued since the last commit form one group.
inline void cp_async_commit() {
    SimThread& t = *detail::tl_thread;
    t.async_groups.push_back(t.async_copies.size());
}

// cp.async.wait_group n: completes every committed group but the n most recent (n = -1: wait_all,
// which also completes copies in no group).
inline void cp_async_wait(int n) {
    SimThread& t = *detail::tl_thread;
    std::size_t done = 0;
    if (n < 0) {
        done = t.async_copies.size();
        t.async_groups.clear();
    } else if (t.async_groups.size() > std::size_t(n)) {
        const std::size_t complete = t.async_groups.size() - std::size_t(n);
        done = t.async_groups[complete - 1];
        t.async_groups.erase(t.async_groups.begin(), t.async_groups.begin() + std::ptrdiff_t(complete));
        for (auto& g : t.async_groups) g -= done;
    }
    for (std::size_t i = 0; i < done; ++i) std::memcpy(t.async_copies[i].dst, t.async_copies[i].data, t.async_copies[i].bytes);
    t.async_copies.erase(t.async_copies.begin(), t.async_copies.begin() + std::ptrdiff_t(done));
}

}  // namespace tessel::sim::warp
