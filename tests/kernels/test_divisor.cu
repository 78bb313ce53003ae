// Divisor (core/divisor.hpp), the multiply-shift division of the strided kernels, against the
// hardware's / and %: every divisor up to 4096, powers of two and their neighbours up to 2^31 - 1,
// and random ones, each with the dividends at which rounding would first go wrong (multiples of d
// and their neighbours, the largest allowed dividend 2^31 - 1) and random ones; for 64-bit
// indices the same over the whole 64-bit range.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include <tessel/core/divisor.hpp>

namespace {

template <class I>
std::size_t wrong_quotients(I d, const std::vector<I>& dividends) {
    const auto div = tessel::Divisor<I>::of(d);
    std::size_t bad = 0;
    for (I n : dividends) {
        I q = 0, r = 0;
        div.divmod(n, q, r);
        bad += q != n / d || r != n % d || div.divide(n) != n / d;
    }
    return bad;
}

template <class I>
std::vector<I> dividends_for(I d, std::mt19937_64& rng) {
    const std::uint64_t limit = (std::uint64_t(1) << 31) - 1;  // the 32-bit paths hold fewer than 2^31 elements
    std::vector<I> n = {0, 1, I(limit), I(limit - 1)};
    for (std::uint64_t k : {std::uint64_t(1), std::uint64_t(2), std::uint64_t(3), limit / d, limit / d - 1}) {
        const std::uint64_t m = k * d;
        for (std::uint64_t x : {m - 1, m, m + 1})
            if (x <= limit) n.push_back(I(x));
    }
    for (int i = 0; i < 64; ++i) n.push_back(I(rng() % (limit + 1)));
    return n;
}

}  // namespace

TEMPLATE_TEST_CASE("Divisor gives the quotient and remainder of / and %", "[kernels][divisor]", std::uint32_t, std::uint64_t) {
    using I = TestType;
    std::mt19937_64 rng(42);
    std::vector<I> divisors;
    for (I d = 1; d <= 4096; ++d) divisors.push_back(d);
    for (int p = 12; p < 31; ++p)
        for (std::int64_t delta : {-1, 0, 1}) divisors.push_back(I((std::int64_t(1) << p) + delta));
    divisors.push_back(I((std::uint64_t(1) << 31) - 1));
    for (int i = 0; i < 2000; ++i) divisors.push_back(I(1 + rng() % ((std::uint64_t(1) << 31) - 1)));
    std::size_t bad = 0, tried = 0;
    for (I d : divisors) {
        const auto n = dividends_for(d, rng);
        bad += wrong_quotients(d, n);
        tried += n.size();
    }
    INFO(tried << " divisions");
    CHECK(bad == 0);
}

// The 64-bit divisor takes every 64-bit dividend: divisors up to 4096, powers of two and their
// neighbours up to 2^64 - 1, random ones of every magnitude; dividends at the multiples of d and
// their neighbours, the largest ones, random ones.
TEST_CASE("the 64-bit Divisor over the whole 64-bit range", "[kernels][divisor]") {
    using I = std::uint64_t;
    std::mt19937_64 rng(7);
    const I top = ~I(0);
    std::vector<I> divisors;
    for (I d = 1; d <= 4096; d += 7) divisors.push_back(d);
    for (int p = 12; p < 64; ++p)
        for (I delta : {I(0), I(1), top}) divisors.push_back((I(1) << p) + delta);  // 2^p - 1, 2^p, 2^p + 1
    divisors.push_back(top);
    for (int i = 0; i < 2000; ++i) divisors.push_back(1 + (rng() >> (rng() % 64)));
    std::size_t bad = 0, tried = 0;
    for (I d : divisors) {
        std::vector<I> n = {0, 1, top, top - 1, d, d - 1, d + 1};
        for (I k : {I(2), I(3), top / d, top / d - 1})
            for (I e : {top, I(0), I(1)}) n.push_back(k * d + e);  // k d - 1, k d, k d + 1 (wrapping past the top is still a dividend)
        for (int i = 0; i < 64; ++i) n.push_back(rng() >> (rng() % 64));
        bad += wrong_quotients(d, n);
        tried += n.size();
    }
    INFO(tried << " divisions");
    CHECK(bad == 0);
}
