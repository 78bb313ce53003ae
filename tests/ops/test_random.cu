// Philox4x32-10: the published known-answer vectors, fills that do not depend on how they are split
// or launched, and the moments of uniform and normal draws (5-sigma bounds, so a correct generator
// fails with probability below 1e-6 per check).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

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

    // A view is filled in its row-major order, as a contiguous tensor of its shape would be: a
    // transpose writes every element, a view of every other column of a poisoned matrix (odd
    // sizes) writes those columns and nothing else.
    auto m = full<float>({37, 29}, -7777.0f);
    uniform_fill(m.transpose(0, 1), 42, 7, -1.0, 3.0);
    auto dense = empty<float>({29, 37});
    uniform_fill(dense, 42, 7, -1.0, 3.0);
    CHECK(m.to_vector() == dense.transpose(0, 1).contiguous().to_vector());
    auto wide = full<double>({5, 21}, -7777.0);
    normal_fill(wide.slice(1, 1, 21, 2), 9, 3);
    auto narrow = empty<double>({5, 10});
    normal_fill(narrow, 9, 3);
    const auto got = wide.to_vector(), want = narrow.to_vector();
    for (std::size_t r = 0; r < 5; ++r)
        for (std::size_t c = 0; c < 21; ++c) {
            CAPTURE(r, c);
            CHECK(got[r * 21 + c] == (c % 2 ? want[r * 10 + c / 2] : -7777.0));
        }
    CHECK_THROWS_WITH(uniform_fill(full<float>({}, 0.0f).expand({4}), 1),
                      Catch::Contains("uniform_fill: the tensor (shape [4], strides [0]) reaches some elements through more than one index"));

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
    CHECK(hi < 5.0);  // also for bf16, whose rounding would reach 5: such values become 2
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

TEST_CASE("uniform values stay below hi where rounding would reach it; ranges and offsets past the end are refused", "[ops][random]") {
    // bf16 and half round 1 - u 2^-9 and 1 - u 2^-12 up to 1: those values become lo, as torch's do.
    const auto b = Philox(7).uniform<__nv_bfloat16>({200000}).to_vector();
    const auto h = Philox(7).uniform<__half>({200000}).to_vector();
    CHECK(std::all_of(b.begin(), b.end(), [](auto v) { return convert<float>(v) >= 0.0f && convert<float>(v) < 1.0f; }));
    CHECK(std::all_of(h.begin(), h.end(), [](auto v) { return convert<float>(v) >= 0.0f && convert<float>(v) < 1.0f; }));
    // float on [1, 2): 1 + (1 - 2^-24) rounds to 2. Find the stream's first word giving u = 1 - 2^-24
    // (top 24 bits set: one word in 2^24) and fill exactly that value.
    std::uint64_t word = 0;
    for (std::uint64_t blk = 0;; ++blk) {
        const auto r = kernels::philox4x32_10(std::uint32_t(blk), std::uint32_t(blk >> 32), 0, 0, 11, 0);
        int k = 0;
        while (k < 4 && (r.w[k] >> 8) != 0xFFFFFFu) ++k;
        if (k < 4) {
            word = blk * 4 + std::uint64_t(k);
            break;
        }
    }
    REQUIRE(word > 0);
    auto one = full<float>({3}, -7.0f);
    uniform_fill(one, 11, word - 1, 1.0, 2.0);
    const auto v = one.to_vector();
    CHECK(v[1] == 1.0f);  // was 2.0f: the rounded-up value maps to lo
    CHECK((v[0] >= 1.0f && v[0] < 2.0f && v[2] >= 1.0f && v[2] < 2.0f));

    // Ranges whose values or width overflow the dtype (torch refuses them too).
    auto f = empty<float>({4});
    CHECK_THROWS_WITH(uniform_fill(f, 1, 0, -1e308, 1e308), Catch::Contains("uniform_fill: the range [-1e+308, 1e+308) of a float32 tensor"));
    CHECK_THROWS_WITH(uniform_fill(f, 1, 0, -3e38, 3e38), Catch::Contains("be at most"));
    auto d = empty<double>({4});
    CHECK_THROWS_AS(uniform_fill(d, 1, 0, -1.7e308, 1.7e308), InvalidArgument);
    auto bf = empty<__nv_bfloat16>({4});
    CHECK_THROWS_AS(uniform_fill(bf, 1, 0, 0.0, 1e39), InvalidArgument);
    // Offsets past the end of the 2^64-value stream: refused, not wrapped to values never written.
    CHECK_THROWS_WITH(uniform_fill(f, 1, std::numeric_limits<std::uint64_t>::max() - 1), Catch::Contains("pass the end of the stream"));
    Philox late(1, std::numeric_limits<std::uint64_t>::max() - 2);
    CHECK_THROWS_WITH(late.uniform<float>({4}), Catch::Contains("passes the end of the stream"));
    CHECK(late.offset() == std::numeric_limits<std::uint64_t>::max() - 2);  // nothing taken
    Philox near(1, std::numeric_limits<std::uint64_t>::max() - 64);
    CHECK(near.uniform<float>({4}).to_vector() != Philox(1).uniform<float>({4}).to_vector());
    // A refused draw leaves the generator where it was (torch checks before its offset moves), so a
    // program that catches the error still draws what it would have.
    Philox g(5), g_twin(5);
    CHECK_THROWS_WITH(g.uniform<float>({4}, 1.0, 0.0), Catch::Contains("uniform"));
    CHECK_THROWS_AS(g.normal<float>({4}, 0.0, -1.0), InvalidArgument);
    CHECK_THROWS_AS(g.uniform<float>({4}, 0.0, 1.0, {.space = MemorySpace::host}), InvalidArgument);
    CHECK(g.offset() == 0);
    CHECK(g.uniform<float>({5}).to_vector() == g_twin.uniform<float>({5}).to_vector());
}

// The stream's value e from its Philox words on the host, in double: uniform in [a, b) or normal
// with mean a and standard deviation b, as random.cuh documents it (not as it computes it: double
// here, the compute type there).
template <class T>
static double stream_value(bool normal, std::uint64_t seed, std::uint64_t e, double a, double b) {
    constexpr std::uint64_t per_block = std::is_same_v<T, double> ? 2 : 4;
    const std::uint64_t blk = e / per_block;
    const auto r = kernels::philox4x32_10(std::uint32_t(blk), std::uint32_t(blk >> 32), 0, 0, std::uint32_t(seed), std::uint32_t(seed >> 32));
    double u[4];
    if constexpr (per_block == 2) {
        u[0] = double((std::uint64_t(r.w[0]) << 21) ^ (r.w[1] >> 11)) * 0x1p-53;
        u[1] = double((std::uint64_t(r.w[2]) << 21) ^ (r.w[3] >> 11)) * 0x1p-53;
    } else {
        for (int k = 0; k < 4; ++k) u[k] = double(r.w[k] >> 8) * 0x1p-24;
    }
    const int k = int(e % per_block);
    if (!normal) return a + (b - a) * u[k];
    const int pair = k & ~1;  // Box-Muller on words (0, 1) and (2, 3): cos for the first, sin for the second
    const double radius = std::sqrt(-2.0 * std::log(1.0 - u[pair])), angle = 2.0 * 3.14159265358979323846 * u[pair + 1];
    return a + b * radius * (k % 2 == 0 ? std::cos(angle) : std::sin(angle));
}

TEMPLATE_TEST_CASE("fills equal the stream value by value at any offset and output alignment", "[ops][random]", float, double,
                   __nv_bfloat16, __half) {
    // A block of the stream inside the range is one vector store where the output allows it
    // (random_fill's whole_blocks), element by element elsewhere: every start in the stream and in
    // the buffer crosses both, and nothing outside the view is written.
    using T = TestType;
    const double poison = -7777.0;
    // Tolerances: uniform a + (b - a) u is one rounding of the compute type (float or double) and
    // one of T; normal adds logf/sqrtf (a few ulp of the compute type each) and, in float, the
    // angle 2 pi u2 - pi rounded once (2^-23 at most) and __sincosf's absolute error on [-pi, pi]
    // (2^-21.4; sincospi in double, a few ulp), on a radius of at most 5.8 (u1 >= 2^-24) times b
    // = 4: under 8 units of the compute type on 4 * 5.8, which 64 covers.
    const double unit = std::is_same_v<T, double> ? 0x1p-52 : std::is_same_v<T, float> ? 0x1p-23 : std::is_same_v<T, __half> ? 0x1p-10 : 0x1p-7;
    const double compute_unit = std::is_same_v<T, double> ? 0x1p-52 : 0x1p-23;
    for (const bool normal : {false, true}) {
        const double a = normal ? 0.5 : -1.0, b = normal ? 4.0 : 3.0;
        for (const std::uint64_t offset : {0, 1, 2, 3, 4, 5, 6, 7, 1 << 20}) {
            for (const std::int64_t start : {0, 1, 2, 3, 4}) {
                for (const std::int64_t n : {1, 2, 3, 4, 5, 9, 37, 1001}) {
                    CAPTURE(normal, offset, start, n);
                    auto buffer = full<T>({n + 10}, convert<T>(poison));
                    const std::uint64_t seed = 0x9E3779B97F4A7C15ull + offset;
                    if (normal) normal_fill(buffer.slice(0, start, start + n), seed, offset, a, b);
                    else uniform_fill(buffer.slice(0, start, start + n), seed, offset, a, b);
                    const auto got = buffer.to_vector();
                    for (std::int64_t i = 0; i < n + 10; ++i) {
                        const double g = convert<double>(got[std::size_t(i)]);
                        if (i < start || i >= start + n) {
                            CHECK(g == convert<double>(convert<T>(poison)));
                            continue;
                        }
                        const double want = stream_value<T>(normal, seed, offset + std::uint64_t(i - start), a, b);
                        const double tolerance = normal ? std::fabs(want) * unit + 64 * compute_unit * 4 * 5.8 : std::fabs(want) * unit + 4 * compute_unit;
                        // Uniform values that round up to b become a (torch's rule).
                        const bool to_lo = !normal && convert<double>(convert<T>(want)) >= b;
                        CHECK_THAT(g, Catch::Matchers::WithinAbs(to_lo ? a : want, tolerance));
                    }
                }
            }
        }
    }
}
