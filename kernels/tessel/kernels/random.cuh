// Counter-based random numbers: Philox4x32-10 (Salmon et al., SC'11). Value e of a stream (seed,
// offset) is a pure function of (seed, offset + e): word (offset+e) % 4 of the Philox block at counter
// (offset+e) / 4 under key seed. So any launch configuration, and any split of a fill into pieces at
// the right offsets, gives the same values.
#pragma once

#include <cstdint>

#include <tessel/core/kernel.hpp>
#include <tessel/ops/functors.hpp>

namespace tessel::kernels {

// The four 32-bit words of one Philox4x32-10 block.
struct PhiloxBlock {
    std::uint32_t w[4];
};

// Philox4x32 with 10 rounds of counter c under key k.
__host__ __device__ inline PhiloxBlock philox4x32_10(std::uint32_t c0, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3,
                                                     std::uint32_t k0, std::uint32_t k1) {
    for (int round = 0; round < 10; ++round) {
        const std::uint64_t p0 = std::uint64_t(0xD2511F53u) * c0, p1 = std::uint64_t(0xCD9E8D57u) * c2;
        const std::uint32_t hi0 = std::uint32_t(p0 >> 32), lo0 = std::uint32_t(p0), hi1 = std::uint32_t(p1 >> 32), lo1 = std::uint32_t(p1);
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

// Fills out[0, n) with values offset .. offset + n - 1 of the stream: uniform in [a, b), or normal
// with mean a and standard deviation b (Box-Muller on the block's two word pairs). double values use
// two words each, so a block holds two of them. `limit` (uniform) is the smallest value of the
// compute type at or above b: a value that rounds up to it (a + (b - a) u rounds, and so does the
// store to a narrower T) becomes a, as torch does, which keeps [a, b) and the lowest value's share.
// budget: threads 256, registers 40
template <Distribution D, class T>
__global__ void random_fill(T* __restrict__ out, std::uint64_t n, std::uint64_t seed, std::uint64_t offset, double a, double b,
                            double limit) {
    constexpr std::uint64_t per_block = std::is_same_v<T, double> ? 2 : 4;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;  // float math for float and narrower
    const std::uint64_t first = offset / per_block, last = (offset + n + per_block - 1) / per_block;
    const std::uint32_t k0 = std::uint32_t(seed), k1 = std::uint32_t(seed >> 32);
    for (std::uint64_t blk = first + std::uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; blk < last;
         blk += std::uint64_t(gridDim.x) * blockDim.x) {
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
            for (int k = 0; k + 1 < int(per_block); k += 2) {
                const C u1 = C(1) - v[k], u2 = v[k + 1];
                const C radius = ops::math::sqrt(C(-2) * ops::math::log(u1)), angle = C(6.283185307179586) * u2;
                v[k] = C(a) + C(b) * radius * ops::math::cos(angle);
                v[k + 1] = C(a) + C(b) * radius * ops::math::sin(angle);
            }
        } else {
            for (int k = 0; k < int(per_block); ++k) v[k] = C(a) + (C(b) - C(a)) * v[k];
        }
        for (int k = 0; k < int(per_block); ++k) {
            const std::uint64_t e = blk * per_block + std::uint64_t(k);
            T t = ops::cast<T>(v[k]);
            if constexpr (D == Distribution::uniform)
                if (!(ops::cast<C>(t) < C(limit))) t = ops::cast<T>(C(a));
            if (e >= offset && e < offset + n) out[e - offset] = t;
        }
    }
}

}  // namespace tessel::kernels
