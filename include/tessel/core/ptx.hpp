// tessel::ptx: the warp-level matrix and asynchronous-copy instructions tensor-core kernels use, as
// small functions. On CUDA each is one inline PTX instruction; on the sim each computes what the PTX
// ISA specifies for the whole warp, with its fragment layouts (sim/warp_matrix.hpp), and faults on
// misuse with the caller's source line. Fragments are 32-bit registers: two 16-bit elements (the
// lower-numbered in the low half), four int8 elements (lowest byte first), or one tf32/fp32/int32.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernel.hpp"

#if defined(TESSEL_BACKEND_SIM)
#include "../sim/warp_matrix.hpp"
#define TESSEL_PTX_SITE , std::source_location where = std::source_location::current()
#else
#define TESSEL_PTX_SITE
#endif

namespace tessel::ptx {

// The fp32-accumulating mma.sync shapes: D (4 fp32) = A (4 registers) * B (2) + C (4 fp32).
#if defined(TESSEL_BACKEND_SIM)
#define TESSEL_PTX_MMA_F32(name, kind, instruction)                                                                        \
    __device__ __forceinline__ void name(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],          \
                                         const float (&c)[4] TESSEL_PTX_SITE) {                                            \
        sim::warp::mma<sim::warp::MmaKind::kind>(reinterpret_cast<std::uint32_t(&)[4]>(d), a, b,                            \
                                                 reinterpret_cast<const std::uint32_t(&)[4]>(c), where);                    \
    }
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TESSEL_PTX_MMA_F32(name, kind, instruction)                                                                        \
    __device__ __forceinline__ void name(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],          \
                                         const float (&c)[4]) {                                                            \
        asm volatile(instruction " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"                           \
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                                        \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),     \
                       "f"(c[3]));                                                                                          \
    }
#else
#define TESSEL_PTX_MMA_F32(name, kind, instruction)                                                                        \
    __device__ __forceinline__ void name(float (&)[4], const std::uint32_t (&)[4], const std::uint32_t (&)[2], const float (&)[4]) { \
        TESSEL_PTX_UNAVAILABLE();                                                                                           \
    }
#endif
#if defined(__CUDA_ARCH__)
#define TESSEL_PTX_UNAVAILABLE() __trap()
#else
#define TESSEL_PTX_UNAVAILABLE()
#endif

// m16n8k16, A 16x16 row-major bf16 (two elements per register), B 16x8 column-major bf16, C and D
// 16x8 fp32. Lane layouts: PTX ISA 9.7.14.5.8.
TESSEL_PTX_MMA_F32(mma_m16n8k16_bf16, bf16_k16, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
// The same for fp16 inputs.
TESSEL_PTX_MMA_F32(mma_m16n8k16_f16, f16_k16, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
// m16n8k8 with tf32 inputs (A 16x8, B 8x8, one element per register; the 13 low mantissa bits are
// not read: round with cvt_rna_tf32 first). Lane layouts: PTX ISA 9.7.14.5.7.
TESSEL_PTX_MMA_F32(mma_m16n8k8_tf32, tf32_k8, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
#undef TESSEL_PTX_MMA_F32

// m16n8k32 int8 x int8 -> int32 (A 16x32, B 32x8, four elements per register; the accumulator
// wraps). Lane layouts: PTX ISA 9.7.14.5.10.
__device__ __forceinline__ void mma_m16n8k32_s8(int (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                                                const int (&c)[4] TESSEL_PTX_SITE) {
#if defined(TESSEL_BACKEND_SIM)
    sim::warp::mma<sim::warp::MmaKind::s8_k32>(reinterpret_cast<std::uint32_t(&)[4]>(d), a, b,
                                               reinterpret_cast<const std::uint32_t(&)[4]>(c), where);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};\n"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
#else
    TESSEL_PTX_UNAVAILABLE();
#endif
}

// cvt.rna.tf32.f32: x rounded to tf32 (nearest, ties away from zero), as the 32-bit register an
// mma_m16n8k8_tf32 operand takes.
__device__ __forceinline__ std::uint32_t cvt_rna_tf32(float x) {
#if defined(TESSEL_BACKEND_SIM)
    return sim::warp::cvt_rna_tf32(x);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    std::uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
#else
    // No cvt.rna.tf32 before sm_80: the same rounding on the bits (infinity and NaN truncated only).
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return ((u & 0x7f800000u) == 0x7f800000u ? u : u + 0x1000u) & 0xffffe000u;
#endif
}

// ex2.approx.ftz.f32: 2^x on the special function unit (one MUFU.EX2), subnormal inputs and results
// flushed to sign-preserving zero (PTX ISA, "ex2"). CUDA's exp2f is this instruction plus subnormal
// handling (its SASS: MUFU.EX2 between a scaling FSETP and two FMULs), so its documented 2 ulp is
// this instruction's error on normal results. The sim (and the host) compute exp2 and flush.
__host__ __device__ __forceinline__ float ex2_approx_ftz(float x) {
#if defined(__CUDA_ARCH__)
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(r) : "f"(x));
    return r;
#else
    auto flush = [](float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; };
    return flush(std::exp2(flush(x)));
#endif
}

#if !defined(TESSEL_BACKEND_SIM)
__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
    return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
#endif

// ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16: N 8x8 matrices of 16-bit elements from
// shared memory; lanes 8j..8j+7 give the row addresses of matrix j (16-byte aligned), every lane
// receives register j of each (PTX ISA 9.7.14.5.15). Trans = true loads each matrix transposed.
template <int N, bool Trans = false>
__device__ __forceinline__ void ldmatrix(std::uint32_t (&r)[N], const void* row TESSEL_PTX_SITE) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
#if defined(TESSEL_BACKEND_SIM)
    sim::warp::ldmatrix<N, Trans>(r, row, where);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    const std::uint32_t a = smem_address(row);
    if constexpr (N == 1 && !Trans) asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
    if constexpr (N == 1 && Trans) asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
    if constexpr (N == 2 && !Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    if constexpr (N == 2 && Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    if constexpr (N == 4 && !Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
    if constexpr (N == 4 && Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(a));
#else
    (void)r, (void)row;
    TESSEL_PTX_UNAVAILABLE();  // ldmatrix needs sm_75
#endif
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800 && !defined(TESSEL_BACKEND_SIM)
// Before sm_80 there is no cp.async: the same copy done at once (src_bytes read, the rest of the
// destination zeroed), so that the commit and wait that follow have nothing left to wait for.
__device__ __forceinline__ void copy_now(void* smem_dst, const void* gmem_src, unsigned bytes, unsigned src_bytes) {
    auto* d = static_cast<unsigned char*>(smem_dst);
    const auto* s = static_cast<const unsigned char*>(gmem_src);
    for (unsigned i = 0; i < bytes; ++i) d[i] = i < src_bytes ? s[i] : 0;
}
#endif

// cp.async.cg.shared.global: 16 bytes from global to shared memory, asynchronously (bypassing L1).
// With src_bytes < 16 only that many are read and the rest are zero-filled (0: a predicated-off
// copy that writes zeros). The destination is valid after cp_async_wait covers its group.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, unsigned src_bytes = 16 TESSEL_PTX_SITE) {
#if defined(TESSEL_BACKEND_SIM)
    sim::warp::cp_async(smem_dst, gmem_src, 16, src_bytes, where);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(smem_dst)), "l"(gmem_src), "r"(src_bytes)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    copy_now(smem_dst, gmem_src, 16, src_bytes);
#endif
}

// cp.async.ca.shared.global of 4 bytes (for operands whose rows are only 4-byte aligned).
__device__ __forceinline__ void cp_async_4(void* smem_dst, const void* gmem_src, unsigned src_bytes = 4 TESSEL_PTX_SITE) {
#if defined(TESSEL_BACKEND_SIM)
    sim::warp::cp_async(smem_dst, gmem_src, 4, src_bytes, where);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_address(smem_dst)), "l"(gmem_src), "r"(src_bytes)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    copy_now(smem_dst, gmem_src, 4, src_bytes);
#endif
}

// cp.async.commit_group: the calling thread's copies issued since its last commit form a group.
__device__ __forceinline__ void cp_async_commit() {
#if defined(TESSEL_BACKEND_SIM)
    sim::warp::cp_async_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// cp.async.wait_group Pending: waits until at most the Pending most recent groups of the calling
// thread are incomplete. Other threads see the data after a barrier that follows the wait.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
    static_assert(Pending >= 0 && Pending < 8, "cp.async.wait_group takes 0..7 here");
#if defined(TESSEL_BACKEND_SIM)
    sim::warp::cp_async_wait(Pending);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

// cp.async.wait_all: every copy of the calling thread complete, committed or not.
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(TESSEL_BACKEND_SIM)
    sim::warp::cp_async_wait(-1);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

}  // namespace tessel::ptx

#undef TESSEL_PTX_SITE
#undef TESSEL_PTX_UNAVAILABLE
