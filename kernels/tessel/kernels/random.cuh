// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11). Value e of a stream (seed,
// offset) is a pure function of (seed, offset + e): word (offset+e) % 4 of the Philox block at counter
// (offset+e) / 4 under key seed. So any launch configuration, and any split of a fill into pieces at
// the right offsets, gives the same values.
#pragma once

#include <cstdint>

#include <tessel/core/kernel.hpp>
#include <tessel/ops/expression.hpp>  // Packed
#include <tessel/ops/functors.hpp>

namespace tessel::kernels {

// The four 32-bit words of one Philox4x32-10 block.
struct PhiloxBlock {
    std::uint32_t w[4];
};

// The high word of a * b. On the GPU, __umulhi and a * b become one IMAD.WIDE; the 64-bit product
// written out costs an extra add per multiply there (20 instructions per Philox block).
__host__ __device__ inline std::uint32_t mul_hi(std::uint32_t a, std::uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return std::uint32_t((std::uint64_t(a) * b) >> 32);
#endif
}

// Philox4x32 with 10 rounds of counter c under key k.
__host__ __device__ inline PhiloxBlock philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                                                     std::uint32_t k0, std::uint32_t k1) {
    for (int round = 0; round < 10; ++round) {
        const std::uint32_t hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0, hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;  // the Weyl sequence bumps the key between rounds
        k1 += 0xBB67AE85u;
    }
    return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) from the top 24 bits (float) or from 53 bits of two words (double).
__host__ __device__ inline float uniform_float(std::uint32_t x) { return float(x >> 8) * 0x1p-24f; }
__host__ __device__ inline double uniform_double(std::uint32_t a, std::uint32_t b) {
    return double((std::uint64_t(a) << 21) ^ (b >> 11)) * 0x1p-53;
}

enum class Distribution { uniform, normal };

// Values per Philox block: 4 of a float or narrower type (a word each), 2 doubles (two words each).
template <class T>
inline constexpr int values_per_block = std::is_same_v<T, double> ? 2 : 4;

// The values of Philox block `blk` under key (k0, k1), as random_fill documents them.
template <Distribution D, class T>
__device__ ops::Packed<T, values_per_block<T>> random_block(std::uint64_t blk, std::uint32_t k0, std::uint32_t k1, double a, double b,
                                                            double limit) {
    constexpr int per_block = values_per_block<T>;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;  // float math for float and narrower
    const PhiloxBlock r = philox4x32_10(std::uint32_t(blk), std::uint32_t(blk >> 32), 0, 0, k0, k1);
    C v[4];
    if constexpr (per_block == 2) {
        v[0] = C(uniform_double(r.w[0], r.w[1]));
        v[1] = C(uniform_double(r.w[2], r.w[3]));
    } else {
        for (int k = 0; k < 4; ++k) v[k] = C(uniform_float(r.w[k]));
    }
    if constexpr (D == Distribution::normal) {
        // u1 in (0, 1] so the logarithm is finite; two normals per pair of uniforms.
        for (int k = 0; k + 1 < per_block; k += 2) {
            const C u1 = C(1) - v[k], u2 = v[k + 1];
            // The logarithm stays exact: a fast one's absolute error near u1 = 1 would exceed -log u1
            // itself (and could make it negative). The angle: for double, sincospi(2 u2) (sin and cos
            // of 2 pi u2 would keep a slow path for large arguments, a 32-byte stack frame, that [0, 2
            // pi) never takes); for float, the hardware's sine and cosine (__sincosf, as cuRAND's
            // Box-Muller) of 2 pi u2 - pi, in [-pi, pi) where their absolute error is below 2^-21.4,
            // negated: 3 instructions for sincospif's 20-odd per pair.
            const C radius = ops::math::sqrt(C(-2) * ops::math::log(u1));
            C s, c;
            if constexpr (std::is_same_v<C, float>) {
                __sincosf(fmaf(u2, 6.28318530718f, -3.14159265359f), &s, &c);
                s = -s, c = -c;
            } else {
                ops::math::sincospi(C(2) * u2, &s, &c);
            }
            v[k] = C(a) + C(b) * radius * c;
            v[k + 1] = C(a) + C(b) * radius * s;
        }
    } else {
        for (int k = 0; k < per_block; ++k) v[k] = C(a) + (C(b) - C(a)) * v[k];
    }
    ops::Packed<T, per_block> p;
    for (int k = 0; k < per_block; ++k) {
        p.v[k] = ops::cast<T>(v[k]);
        if constexpr (D == Distribution::uniform)
            if (!(ops::cast<C>(p.v[k]) < C(limit))) p.v[k] = ops::cast<T>(C(a));
    }
    return p;
}

// Fills out[0, n) with values offset .. offset + n - 1 of the stream: uniform in [a, b), or normal
// with mean a and standard deviation b (Box-Muller on the block's two word pairs). double values use
// two words each, so a block holds two of them. `limit` (uniform) is the smallest value of the
// compute type at or above b: a value that rounds up to it (a + (b - a) u rounds, and so does the
// store to a narrower T) becomes a, as torch does, which keeps [a, b) and the lowest value's share.
// Where the output's block boundaries are aligned to a block's size (a fresh tensor filled from a
// block boundary, as Philox's draws are), each block inside the range is one unguarded store (16
// bytes of float, 8 of bf16), and threads 0 and 1 write the partial blocks at the range's ends
// element by element; elsewhere every block goes element by element.
// 48 registers (bf16 uniform; 5 blocks of 256 a multiprocessor): held to 40 with __launch_bounds__,
// the normal fills' loops took 8% more instructions, and these fills are bound by instructions.
// budget: threads 256, registers 48
template <Distribution D, class T>
__global__ void random_fill(T* __restrict__ out, std::uint64_t n, std::uint64_t seed, std::uint64_t offset, double a, double b,
                            double limit) {
    constexpr std::uint64_t per_block = values_per_block<T>;
    const std::uint64_t first = offset / per_block, last = (offset + n + per_block - 1) / per_block;
    const std::uint32_t k0 = std::uint32_t(seed), k1 = std::uint32_t(seed >> 32);
    const std::uint64_t thread = std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x, threads = std::uint64_t(gridDim.x) * blockDim.x;
    auto store_part = [&](std::uint64_t blk) {
        const auto p = random_block<D, T>(blk, k0, k1, a, b, limit);
        for (int k = 0; k < int(per_block); ++k) {
            const std::uint64_t e = blk * per_block + std::uint64_t(k);
            if (e >= offset && e < offset + n) out[e - offset] = p.v[k];
        }
    };
    const bool whole_blocks =
        (reinterpret_cast<std::uintptr_t>(out) - std::uintptr_t(offset) * sizeof(T)) % (per_block * sizeof(T)) == 0;
    if (!whole_blocks) {
        for (std::uint64_t blk = first + thread; blk < last; blk += threads) store_part(blk);
        return;
    }
    // Blocks [inner, outer) lie inside the range (inner > outer for a range inside one block).
    const std::uint64_t inner = (offset + per_block - 1) / per_block, outer = (offset + n) / per_block;
    for (std::uint64_t blk = inner + thread; blk < outer; blk += threads) {
        const auto p = random_block<D, T>(blk, k0, k1, a, b, limit);
        *reinterpret_cast<ops::Packed<T, int(per_block)>*>(out + (blk * per_block - offset)) = p;
    }
    if (thread == 0 && first < inner) store_part(first);
    if (thread == 1 && last - 1 >= outer && !(last - 1 == first && first < inner)) store_part(last - 1);
}

}  // namespace tessel::kernels
