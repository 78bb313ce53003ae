// The sim's NCCL (sim/nccl.hpp) reduces as NCCL's kernels do; this is that arithmetic, per element
// type, apart from the collectives' bookkeeping.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace tessel::sim::nccl::detail {

// Reductions in NCCL's arithmetic (src/device/reduce_kernel.h, enqueue.cc), one rank after another
// in rank order (NCCL's order across ranks depends on its algorithm and is not specified):
//  - integers in the element type, wrapping (through unsigned arithmetic, which is defined);
//  - floating point rounded to the element type at every step (fp8 through half, as __hadd and
//    __hmul; float and double steps are exact in double before the one rounding, since double has
//    more than twice their precision plus two bits);
//  - max/min as fmax/fmin (__hmax/__hmin): a NaN loses to a number, unlike std::max and torch;
//  - avg on floating point premultiplies each rank's value by 1/n rounded to the element type
//    (ncclDevPreMulSum), then sums; on integers it divides the sum (ncclDevSumPostDiv).
// The operations, in ncclRedOp_t's order.
enum class Reduction { sum, prod, max, min, avg };
template <class T>
double widen(T v) {
    if constexpr (std::is_same_v<T, __half>) return double(__half2float(v));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return double(__bfloat162float(v));
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>) return double(float(v));
    else return double(v);
}
template <class T>
T narrow(double v) {  // one rounding to T (fp8: to half first, as NCCL's fp8 arithmetic)
    if constexpr (std::is_same_v<T, __half>) return __double2half(v);
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __double2bfloat16(v);
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>) return T(__double2half(v));
    else return T(v);
}
template <class T>
T combine(Reduction op, T a, T b) {
    if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        if (op == Reduction::max) return std::max(a, b);
        if (op == Reduction::min) return std::min(a, b);
        return T(U(op == Reduction::prod ? U(U(a) * U(b)) : U(U(a) + U(b))));
    } else {
        const double x = widen(a), y = widen(b);
        if (op == Reduction::max) return narrow<T>(std::fmax(x, y));
        if (op == Reduction::min) return narrow<T>(std::fmin(x, y));
        return narrow<T>(op == Reduction::prod ? x * y : x + y);
    }
}
// avg's scalar as NCCL's host code rounds it: 1/n in double, then through float to T.
template <class T>
T inverse(std::size_t n) {
    if constexpr (std::is_same_v<T, double>) return 1.0 / double(n);
    else if constexpr (std::is_same_v<T, __half>) return __float2half(float(1.0 / double(n)));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(float(1.0 / double(n)));
    else return T(float(1.0 / double(n)));
}
// Rank k's value as it enters the sum: avg on floating point premultiplies it by inverse(n) in T.
template <class T>
T contribution(Reduction op, T v, std::size_t n) {
    if constexpr (std::is_integral_v<T>) return v;
    else return op == Reduction::avg ? narrow<T>(widen(v) * widen(inverse<T>(n))) : v;
}
template <class T>
T finish(Reduction op, T acc, std::size_t n) {
    if constexpr (std::is_integral_v<T>) return op == Reduction::avg ? T(acc / T(n)) : acc;
    else return acc;
}

}  // namespace tessel::sim::nccl::detail
