// Division by a number fixed at launch, for the index arithmetic of the strided kernels: a 32-bit
// division is a ~20-instruction software routine on NVIDIA GPUs (a 64-bit one a subroutine call),
// while a divisor known before the launch turns each quotient into a multiply and a shift
// (Granlund and Montgomery: m = ceil(2^(32+p) / d) with p = ceil(log2 d) gives floor(n / d) =
// floor(n * m / 2^(32+p)) for every n < 2^32; n < 2^31 keeps n * m within 64 bits). 64-bit index
// types use the same paper's method for full-width dividends (below); other types divide plainly.
#pragma once

#include <cstdint>

#include "kernel.hpp"

namespace tessel {

template <class I>
struct Divisor {
    I d;
    static Divisor of(I v) { return {v}; }
    __host__ __device__ I value() const { return d; }
    __host__ __device__ I divide(I n) const { return n / d; }
    // n / d into quotient, n % d into remainder.
    __host__ __device__ void divmod(I n, I& quotient, I& remainder) const {
        quotient = n / d;
        remainder = n - quotient * d;
    }
};

// Valid for dividends and divisors below 2^31 (the 32-bit index paths hold fewer than 2^31 elements).
template <>
struct Divisor<std::uint32_t> {
    std::uint32_t d;
    std::uint32_t shift;  // 32 + ceil(log2 d)
    std::uint64_t multiplier;
    static Divisor of(std::uint32_t v) {
        if (v == 0) return {0, 32, 0};  // an empty dim: nothing is ever divided by it
        std::uint32_t p = 0;
        while ((std::uint64_t(1) << p) < v) ++p;
        const std::uint64_t m = ((std::uint64_t(1) << (32 + p)) + v - 1) / v;  // 2^(32+p) / d rounded up, < 2^34
        return {v, 32 + p, m};
    }
    __host__ __device__ std::uint32_t value() const { return d; }
    __host__ __device__ std::uint32_t divide(std::uint32_t n) const { return std::uint32_t((std::uint64_t(n) * multiplier) >> shift); }
    __host__ __device__ void divmod(std::uint32_t n, std::uint32_t& quotient, std::uint32_t& remainder) const {
        quotient = divide(n);
        remainder = n - quotient * d;
    }
};

// 64-bit indices (tensors of 2^31 elements and more): Granlund and Montgomery's round-up method for
// all 64-bit dividends, with l = ceil(log2 d) and m = floor(2^64 (2^l - d) / d) + 1, a 64-bit
// multiplier: t = the high half of m * n, q = (t + ((n - t) >> min(l, 1))) >> max(l - 1, 0).
// One __umul64hi and a few adds and shifts, instead of the 64-bit division subroutine.
template <>
struct Divisor<std::uint64_t> {
    std::uint64_t d;
    std::uint64_t multiplier;
    std::uint32_t shift1, shift2;
    static Divisor of(std::uint64_t v) {
        if (v == 0) return {0, 0, 0, 0};  // an empty dim: nothing is ever divided by it
        std::uint32_t l = 0;
        while (l < 64 && (std::uint64_t(1) << l) < v) ++l;
        const unsigned __int128 two_l = l == 64 ? (unsigned __int128)1 << 64 : (unsigned __int128)(std::uint64_t(1) << l);
        const auto m = std::uint64_t((((unsigned __int128)1 << 64) * (two_l - v)) / v + 1);
        return {v, m, l < 1 ? l : 1, l > 1 ? l - 1 : 0};
    }
    __host__ __device__ std::uint64_t value() const { return d; }
    __host__ __device__ std::uint64_t divide(std::uint64_t n) const {
#if defined(__CUDA_ARCH__)
        const std::uint64_t t = __umul64hi(multiplier, n);
#else
        const auto t = std::uint64_t(((unsigned __int128)multiplier * n) >> 64);
#endif
        return (t + ((n - t) >> shift1)) >> shift2;
    }
    __host__ __device__ void divmod(std::uint64_t n, std::uint64_t& quotient, std::uint64_t& remainder) const {
        quotient = divide(n);
        remainder = n - quotient * d;
    }
};

// Calls f(d, coordinate) for each of the first `rank` dims of row-major flat index i over `shape`,
// last dim first. Unrolled to MaxRank with a guard, so a kernel's parameters are read where they
// are and the coordinates stay in registers (a loop bounded by `rank` copies both to local memory).
template <int MaxRank, class I, class F>
__host__ __device__ inline void for_each_coordinate(I i, int rank, const Divisor<I>* shape, F&& f) {
TESSEL_PRAGMA_UNROLL
    for (int d = MaxRank - 1; d >= 0; --d) {
        if (d < rank) {
            I coordinate;
            shape[d].divmod(i, i, coordinate);
            f(d, coordinate);
        }
    }
}

// Where row-major flat index i over `shape` lies in a tensor of `stride`s (in elements).
template <int MaxRank, class I>
__host__ __device__ inline std::int64_t strided_offset(I i, int rank, const Divisor<I>* shape, const std::int64_t* stride) {
    std::int64_t at = 0;
    for_each_coordinate<MaxRank>(i, rank, shape, [&](int d, I k) { at += std::int64_t(k) * stride[d]; });
    return at;
}

}  // namespace tessel
