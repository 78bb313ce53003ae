// Philox4x32-10: the published known-answer vectors, fills that do not depend on how they are split
// or launched, and the moments of uniform and normal draws (5-sigma bounds, so a correct generator
// fails with probability below 1e-6 per check).
#include <catch2/catch.hpp>

#include <cmath>

#include <tessel/ops/random.hpp>

using namespace tessel;

TEST_CASE("Philox4x32-10 matches Random123's known-answer vectors", "[ops][random]") {
    struct Kat {
        std::uint32_t c[4], k[2], out[4];
    };
    const Kat kats[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (const Kat& k : kats) {
        const auto r = kernels::philox4x32_10(k.c[0], k.c[1], k.c[2], k.c[3], k.k[0], k.k[1]);
        for (int i = 0; i < 4; ++i) CHECK(r.w[i] == k.out[i]);
    }
    // And the device fill's first values are those words: seed 0, counter 0.
    auto t = empty<float>({4});
    uniform_fill(t, 0);
    const auto v = t.to_vector();
    for (int i = 0; i < 4; ++i) CHECK(v[std::size_t(i)] == float(kats[0].out[i] >> 8) * 0x1p-24f);
}

TEST_CASE("fills depend on (seed, offset) only, not on how they are split", "[ops][random]") {
    const std::int64_t n = 1000003;
    auto whole = empty<float>({n});
    uniform_fill(whole, 42, 7, -1.0, 3.0);
    auto parts = empty<float>({n});
    uniform_fill(parts.slice(0, 0, 333), 42, 7, -1.0, 3.0);  // offsets not on block boundaries
    uniform_fill(parts.slice(0, 333, n), 42, 7 + 333, -1.0, 3.0);
    CHECK(whole.to_vector() == parts.to_vector());
    auto other = empty<float>({n});
    uniform_fill(other, 43, 7, -1.0, 3.0);
    CHECK(whole.to_vector() != other.to_vector());

    Philox a(5), b(5);
    const auto x1 = a.normal<double>({1001}), x2 = a.normal<double>({1001});
    const auto y1 = b.normal<double>({1001});
    CHECK(x1.to_vector() == y1.to_vector());
    CHECK(x1.to_vector() != x2.to_vector());
    CHECK(a.offset() == 2 * 501 * 4);  // two draws of 501 blocks (2 doubles each) of 4 words
}

TEMPLATE_TEST_CASE("uniform and normal moments", "[ops][random]", float, double, __nv_bfloat16) {
    using T = TestType;
    const std::int64_t n = 1 << 20;
    Philox g(1234);
    const auto u = g.uniform<T>({n}, 2.0, 5.0).to_vector();
    long double s = 0, s2 = 0;
    double lo = 1e9, hi = -1e9;
    for (const T& x : u) {
        const double d = convert<double>(x);
        s += d, s2 += d * d, lo = std::min(lo, d), hi = std::max(hi, d);
    }
    const double mean = double(s / n), var = double(s2 / n) - mean * mean;
    // Uniform on [2, 5): mean 3.5, variance 9/12; standard error of the mean sqrt(0.75 / n).
    CHECK(std::fabs(mean - 3.5) < 5 * std::sqrt(0.75 / n) + (std::is_same_v<T, __nv_bfloat16> ? 0.02 : 0));
    CHECK(std::fabs(var - 0.75) < 0.01);
    CHECK(lo >= 2.0);
    CHECK(hi <= 5.0);  // bf16 rounding may reach 5 exactly
    const auto z = g.normal<T>({n}, -1.0, 2.0).to_vector();
    s = s2 = 0;
    std::int64_t within = 0;
    for (const T& x : z) {
        const double d = convert<double>(x);
        s += d, s2 += d * d;
        within += std::fabs(d + 1.0) < 2.0;
    }
    const double zm = double(s / n), zv = double(s2 / n) - zm * zm;
    CHECK(std::fabs(zm + 1.0) < 5 * 2.0 / std::sqrt(double(n)) + (std::is_same_v<T, __nv_bfloat16> ? 0.02 : 0));
    CHECK(std::fabs(zv - 4.0) < 0.05);
    CHECK(std::fabs(double(within) / n - 0.682689) < 0.003);  // within one sigma
}
