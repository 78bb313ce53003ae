// The CUDA kernel language for the host compiler: the one header that differs when a kernel from
// kernels/ is built for the sim. Qualifiers, built-in variables, barriers, warp collectives,
// atomics, fences and the device math the kernels use.
#pragma once

#include "qualifiers.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "block_exec.hpp"

#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
#ifndef __noinline__
#define __noinline__ __attribute__((noinline))
#endif
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif

// Built-in variables of the running CUDA thread.
#define threadIdx (static_cast<const uint3&>(::tessel::sim::detail::tl_thread->idx))
#define blockIdx (static_cast<const uint3&>(::tessel::sim::detail::tl_block->block_idx))
#define blockDim (static_cast<const dim3&>(::tessel::sim::detail::tl_block->block_dim))
#define gridDim (static_cast<const dim3&>(::tessel::sim::detail::tl_block->grid_dim))
inline constexpr int warpSize = 32;

namespace tessel::sim::detail {

inline std::uint64_t sync_op(SyncKind kind, unsigned mask, std::uint64_t value, int arg, int width, int pred,
                             const std::source_location& where) {
    SimThread& t = *tl_thread;
    t.kind = kind;
    t.site = where;
    t.mask = mask;
    t.value = value;
    t.arg = arg;
    t.width = width;
    t.pred = pred;
    return tl_block->exec->synchronize(t);
}

template <class T>
std::uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp shuffles move types of at most 8 bytes");
    std::uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
T from_bits(std::uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

template <class T, class F>
T atomic_update(T* addr, F f) {
    std::atomic_ref<T> ref(*addr);
    T old = ref.load(std::memory_order_relaxed);
    while (!ref.compare_exchange_weak(old, f(old), std::memory_order_relaxed)) {
    }
    return old;
}

}  // namespace tessel::sim::detail

// Dynamic shared memory: TESSEL_DYNAMIC_SHARED(float, tile) declares `float* tile`.
#define TESSEL_DYNAMIC_SHARED(type, name) \
    type* name = reinterpret_cast<type*>(::tessel::sim::detail::tl_block->dynamic_smem)

// ---- barriers ----------------------------------------------------------------------------------
inline void __syncthreads(std::source_location w = std::source_location::current()) {
    ::tessel::sim::detail::sync_op(::tessel::sim::SyncKind::syncthreads, 0, 0, 0, 32, 0, w);
}
inline int __syncthreads_count(int pred, std::source_location w = std::source_location::current()) {
    return int(::tessel::sim::detail::sync_op(::tessel::sim::SyncKind::syncthreads_count, 0, 0, 0, 32, pred != 0, w));
}
inline int __syncthreads_and(int pred, std::source_location w = std::source_location::current()) {
    return int(::tessel::sim::detail::sync_op(::tessel::sim::SyncKind::syncthreads_and, 0, 0, 0, 32, pred != 0, w));
}
inline int __syncthreads_or(int pred, std::source_location w = std::source_location::current()) {
    return int(::tessel::sim::detail::sync_op(::tessel::sim::SyncKind::syncthreads_or, 0, 0, 0, 32, pred != 0, w));
}
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location w = std::source_location::current()) {
    ::tessel::sim::detail::sync_op(::tessel::sim::SyncKind::syncwarp, mask, 0, 0, 32, 0, w);
}

// ---- warp collectives --------------------------------------------------------------------------
template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,
              std::source_location w = std::source_location::current()) {
    using namespace ::tessel::sim;
    return detail::from_bits<T>(detail::sync_op(SyncKind::shfl_idx, mask, detail::to_bits(var), src_lane, width, 0, w));
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                 std::source_location w = std::source_location::current()) {
    using namespace ::tessel::sim;
    return detail::from_bits<T>(detail::sync_op(SyncKind::shfl_up, mask, detail::to_bits(var), int(delta), width, 0, w));
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                   std::source_location w = std::source_location::current()) {
    using namespace ::tessel::sim;
    return detail::from_bits<T>(detail::sync_op(SyncKind::shfl_down, mask, detail::to_bits(var), int(delta), width, 0, w));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,
                  std::source_location w = std::source_location::current()) {
    using namespace ::tessel::sim;
    return detail::from_bits<T>(detail::sync_op(SyncKind::shfl_xor, mask, detail::to_bits(var), lane_mask, width, 0, w));
}
inline unsigned __ballot_sync(unsigned mask, int pred, std::source_location w = std::source_location::current()) {
    return unsigned(::tessel::sim::detail::sync_op(::tessel::sim::SyncKind::ballot, mask, 0, 0, 32, pred != 0, w));
}
inline int __all_sync(unsigned mask, int pred, std::source_location w = std::source_location::current()) {
    return int(::tessel::sim::detail::sync_op(::tessel::sim::SyncKind::all, mask, 0, 0, 32, pred != 0, w));
}
inline int __any_sync(unsigned mask, int pred, std::source_location w = std::source_location::current()) {
    return int(::tessel::sim::detail::sync_op(::tessel::sim::SyncKind::any, mask, 0, 0, 32, pred != 0, w));
}
// The lanes of the caller's warp that reach this call together: the sim waits until no live lane
// of the warp is still running, then hands every lane that arrived here the set of those lanes.
inline unsigned __activemask(std::source_location w = std::source_location::current()) {
    return unsigned(::tessel::sim::detail::sync_op(::tessel::sim::SyncKind::activemask, 0xffffffffu, 0, 0, 32, 0, w));
}

// ---- atomics (correct across blocks on different OS threads) ------------------------------------
#define TESSEL_SIM_ATOMIC_RMW(name, T, expr)                                         \
    inline T name(T* address, T val) {                                              \
        return ::tessel::sim::detail::atomic_update(address, [&](T old) -> T { (void)old; return static_cast<T>(expr); }); \
    }                                                                               \
    inline T name##_block(T* address, T val) { return name(address, val); }         \
    inline T name##_system(T* address, T val) { return name(address, val); }

TESSEL_SIM_ATOMIC_RMW(atomicAdd, int, old + val)
TESSEL_SIM_ATOMIC_RMW(atomicAdd, unsigned, old + val)
TESSEL_SIM_ATOMIC_RMW(atomicAdd, unsigned long long, old + val)
TESSEL_SIM_ATOMIC_RMW(atomicAdd, float, old + val)
TESSEL_SIM_ATOMIC_RMW(atomicAdd, double, old + val)
TESSEL_SIM_ATOMIC_RMW(atomicSub, int, old - val)
TESSEL_SIM_ATOMIC_RMW(atomicSub, unsigned, old - val)
TESSEL_SIM_ATOMIC_RMW(atomicExch, int, val)
TESSEL_SIM_ATOMIC_RMW(atomicExch, unsigned, val)
TESSEL_SIM_ATOMIC_RMW(atomicExch, unsigned long long, val)
TESSEL_SIM_ATOMIC_RMW(atomicExch, float, val)
TESSEL_SIM_ATOMIC_RMW(atomicMin, int, val < old ? val : old)
TESSEL_SIM_ATOMIC_RMW(atomicMin, unsigned, val < old ? val : old)
TESSEL_SIM_ATOMIC_RMW(atomicMin, long long, val < old ? val : old)
TESSEL_SIM_ATOMIC_RMW(atomicMin, unsigned long long, val < old ? val : old)
TESSEL_SIM_ATOMIC_RMW(atomicMin, float, std::fmin(old, val))
TESSEL_SIM_ATOMIC_RMW(atomicMin, double, std::fmin(old, val))
TESSEL_SIM_ATOMIC_RMW(atomicMax, int, val > old ? val : old)
TESSEL_SIM_ATOMIC_RMW(atomicMax, unsigned, val > old ? val : old)
TESSEL_SIM_ATOMIC_RMW(atomicMax, long long, val > old ? val : old)
TESSEL_SIM_ATOMIC_RMW(atomicMax, unsigned long long, val > old ? val : old)
TESSEL_SIM_ATOMIC_RMW(atomicMax, float, std::fmax(old, val))
TESSEL_SIM_ATOMIC_RMW(atomicMax, double, std::fmax(old, val))
TESSEL_SIM_ATOMIC_RMW(atomicAnd, int, old & val)
TESSEL_SIM_ATOMIC_RMW(atomicAnd, unsigned, old & val)
TESSEL_SIM_ATOMIC_RMW(atomicAnd, unsigned long long, old & val)
TESSEL_SIM_ATOMIC_RMW(atomicOr, int, old | val)
TESSEL_SIM_ATOMIC_RMW(atomicOr, unsigned, old | val)
TESSEL_SIM_ATOMIC_RMW(atomicOr, unsigned long long, old | val)
TESSEL_SIM_ATOMIC_RMW(atomicXor, int, old ^ val)
TESSEL_SIM_ATOMIC_RMW(atomicXor, unsigned, old ^ val)
TESSEL_SIM_ATOMIC_RMW(atomicXor, unsigned long long, old ^ val)
TESSEL_SIM_ATOMIC_RMW(atomicInc, unsigned, old >= val ? 0u : old + 1u)
TESSEL_SIM_ATOMIC_RMW(atomicDec, unsigned, (old == 0u || old > val) ? val : old - 1u)
#undef TESSEL_SIM_ATOMIC_RMW

#define TESSEL_SIM_ATOMIC_CAS(T)                                                       \
    inline T atomicCAS(T* address, T compare, T val) {                                \
        std::atomic_ref<T> ref(*address);                                             \
        ref.compare_exchange_strong(compare, val, std::memory_order_relaxed);          \
        return compare;                                                               \
    }                                                                                 \
    inline T atomicCAS_block(T* a, T c, T v) { return atomicCAS(a, c, v); }           \
    inline T atomicCAS_system(T* a, T c, T v) { return atomicCAS(a, c, v); }
TESSEL_SIM_ATOMIC_CAS(int)
TESSEL_SIM_ATOMIC_CAS(unsigned)
TESSEL_SIM_ATOMIC_CAS(unsigned long long)
TESSEL_SIM_ATOMIC_CAS(unsigned short)
#undef TESSEL_SIM_ATOMIC_CAS

// ---- fences, loads, clocks ----------------------------------------------------------------------
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <class T>
T __ldg(const T* p) { return *p; }
inline long long clock64() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
inline long long __clock64() { return clock64(); }

// ---- integer intrinsics -------------------------------------------------------------------------
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(unsigned(x)); }
inline int __clzll(long long x) { return std::countl_zero((unsigned long long)x); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(unsigned(x)) + 1; }
inline int __ffsll(long long x) { return x == 0 ? 0 : std::countr_zero((unsigned long long)x) + 1; }
inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
inline int __mul24(int a, int b) { return int((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((unsigned long long)a * b >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)((__int128)a * b >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)((unsigned __int128)a * b >> 64);
}

// ---- float intrinsics and math (CUDA's global-namespace spellings) ------------------------------
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : (x != x ? 0.f : x)); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline int __float2int_rn(float x) { return int(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline void sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline float exp10f(float x) { return std::pow(10.0f, x); }
// sin(pi x) and cos(pi x): x reduced to [-1, 1] first (exact), so pi x keeps its accuracy.
inline void sincospi(double x, double* s, double* c) {
    const double r = x - 2.0 * std::nearbyint(x / 2.0), a = 3.14159265358979323846 * r;
    *s = std::sin(a), *c = std::cos(a);
}
inline void sincospif(float x, float* s, float* c) {
    double ds, dc;
    sincospi(double(x), &ds, &dc);
    *s = float(ds), *c = float(dc);
}
// CUDA's unqualified min/max overloads for the arithmetic types.
template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
inline T min(T a, T b) { return b < a ? b : a; }
template <class T, class = std::enable_if_t<std::is_arithmetic_v<T>>>
inline T max(T a, T b) { return a < b ? b : a; }

// ---- thread-block clusters (sm_90): the part of cooperative_groups' cluster_group kernels use ----
// A launch without clusters is a cluster of one block. In the sim, map_shared_rank maps addresses of
// dynamic shared memory only (static __shared__ is per worker thread there); a cluster kernel keeps
// what other blocks read in its dynamic shared memory.
namespace cooperative_groups {
class cluster_group {
public:
    // Blocks in the cluster, and this block's rank among them (x fastest, as CUDA numbers them).
    unsigned num_blocks() const { return dims().x * dims().y * dims().z; }
    unsigned block_rank() const {
        const dim3 d = dims();
        const uint3 b = ::tessel::sim::detail::tl_block->block_idx;
        return b.x % d.x + b.y % d.y * d.x + b.z % d.z * d.x * d.y;
    }
    dim3 dim_blocks() const { return dims(); }
    // Every thread of every block of the cluster arrives before any leaves; shared memory written
    // before it is visible to the whole cluster after it.
    void sync(std::source_location w = std::source_location::current()) const {
        auto* block = ::tessel::sim::detail::tl_block;
        __syncthreads(w);
        if (block->cluster && ::tessel::sim::detail::tl_thread->tid == 0)
            block->cluster->arrive_and_wait(std::string(w.file_name()) + ":" + std::to_string(w.line()));
        __syncthreads(w);
    }
    // The address in block `rank`'s shared memory that corresponds to `addr` in this block's.
    template <class T>
    T* map_shared_rank(T* addr, int rank, std::source_location w = std::source_location::current()) const {
        auto* block = ::tessel::sim::detail::tl_block;
        if (!block->cluster) {
            if (rank != 0) throw ::tessel::sim::KernelFault("map_shared_rank(" + std::to_string(rank) + ") in a launch without clusters");
            return addr;
        }
        const auto* p = reinterpret_cast<const unsigned char*>(addr);
        const std::ptrdiff_t offset = p - block->dynamic_smem;
        if (offset < 0 || std::size_t(offset) >= block->cluster->smem_bytes())
            throw ::tessel::sim::KernelFault("map_shared_rank: the address is not in this block's dynamic shared memory (the sim "
                                             "maps dynamic shared memory only; keep what other blocks read there)");
        if (rank < 0 || unsigned(rank) >= block->cluster->size())
            throw ::tessel::sim::KernelFault("map_shared_rank: rank " + std::to_string(rank) + " in a cluster of " +
                                             std::to_string(block->cluster->size()) + " blocks");
        if (unsigned(rank) != block_rank()) block->cluster->remote_access(std::string(w.file_name()) + ":" + std::to_string(w.line()));
        return reinterpret_cast<T*>(block->cluster->smem(unsigned(rank)) + offset);
    }

private:
    static dim3 dims() {
        auto* block = ::tessel::sim::detail::tl_block;
        return block->cluster ? block->cluster_dim : dim3(1, 1, 1);
    }
};
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups
