// sort, argsort, cumsum, cumprod and unique against host references: stable order with many equal
// keys, descending, NaN and infinity placement, another axis than the last, every accumulation type.
// Outputs of a known shape have their cache block poisoned (0xFF) first, so an unwritten element fails.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include <tessel/ops/sort.hpp>

#include "../support/random_tensor.hpp"

using namespace tessel;

namespace {
template <class T>
std::pair<Tensor<T>, std::vector<T>> random_tensor(const Shape& s, std::uint64_t seed, double lo, double hi) {
    auto h = testing::random_host<T>(std::size_t(Layout::contiguous(s).numel()), seed, lo, hi);
    return {from_host<T>(h.span(), s), std::vector<T>(h.data(), h.data() + h.n)};
}

// Stable sort of each row by value (NaN after everything ascending, before everything descending).
template <class T>
std::vector<std::int64_t> reference_order(const std::vector<T>& v, std::int64_t rows, std::int64_t cols, bool descending) {
    std::vector<std::int64_t> idx(v.size());
    for (std::int64_t r = 0; r < rows; ++r) {
        auto* row = idx.data() + r * cols;
        std::iota(row, row + cols, 0);
        std::stable_sort(row, row + cols, [&](std::int64_t a, std::int64_t b) {
            const double x = convert<double>(v[std::size_t(r * cols + a)]), y = convert<double>(v[std::size_t(r * cols + b)]);
            if (std::isnan(x) || std::isnan(y)) return descending ? (std::isnan(x) && !std::isnan(y)) : (!std::isnan(x) && std::isnan(y));
            return descending ? x > y : x < y;
        });
    }
    return idx;
}
}  // namespace

TEMPLATE_TEST_CASE("sort and argsort rows, stable, both directions", "[ops][sort]", float, std::int32_t, __nv_bfloat16, double) {
    using T = TestType;
    const std::int64_t rows = 7, cols = 1031;
    // Few distinct values (integers 0..9, bf16 rounding) make ties common: stability matters.
    auto [x, v] = random_tensor<T>({rows, cols}, 3, 0, std::is_integral_v<T> ? 10 : 4);
    for (bool descending : {false, true}) {
        INFO((descending ? "descending" : "ascending"));
        testing::poison_next<T>({rows, cols});  // the blocks the values and indices will take
        testing::poison_next<std::int64_t>({rows, cols});
        const auto s = sort(x, -1, descending);
        const auto want = reference_order(v, rows, cols, descending);
        CHECK(s.indices.to_vector() == want);
        const auto got = s.values.to_vector();
        std::size_t bad = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
            bad += std::memcmp(&got[i], &v[std::size_t(std::int64_t(i) / cols * cols + want[i])], sizeof(T)) != 0;
        CHECK(bad == 0);
    }
    // Along axis 0 each column is sorted on its own: the stable order of the transposed rows.
    testing::poison_next<std::int64_t>({rows, cols});
    const auto by_col = argsort(x, 0).to_vector();
    std::vector<T> columns(v.size());
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) columns[std::size_t(c * rows + r)] = v[std::size_t(r * cols + c)];
    const auto want_by_col = reference_order(columns, cols, rows, false);
    std::size_t bad = 0;
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) bad += by_col[std::size_t(r * cols + c)] != want_by_col[std::size_t(c * rows + r)];
    CHECK(bad == 0);
}

TEST_CASE("NaN of either sign sorts after +inf (before it descending), as in torch; infinities at the ends", "[ops][sort]") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    // -nan has the sign bit set, as x86's 0/0 does: raw radix order would put it before -inf.
    auto x = from_host<float>({3.f, nan, -inf, 1.f, -nan, inf, -2.f}, {7});
    const auto sorted = sort(x);
    const auto up = sorted.values.to_vector();
    CHECK(up[0] == -inf);
    CHECK(up[1] == -2.f);
    CHECK(up[4] == inf);
    CHECK((std::isnan(up[5]) && std::isnan(up[6])));
    CHECK(sorted.indices.to_vector() == std::vector<std::int64_t>{2, 6, 3, 0, 5, 1, 4});  // stable among the NaNs
    const auto down = sort(x, -1, true).values.to_vector();
    CHECK((std::isnan(down[0]) && std::isnan(down[1])));
    CHECK(down[2] == inf);
    CHECK(down[6] == -inf);
    CHECK(x.to_vector()[4] != x.to_vector()[4]);  // the input itself is left as it was
    CHECK(std::signbit(x.to_vector()[4]));
    const auto z = from_host<double>({0.0, 5.0, -1.0}, {3});
    const auto made = sort(evaluate(z / z)).values.to_vector();  // NaN from the backend's own 0/0, whatever its sign
    CHECK(made[0] == 1.0);
    CHECK(made[1] == 1.0);
    CHECK(std::isnan(made[2]));
    CHECK_THROWS_WITH(sort(empty<__nv_fp8_e4m3>({4})), Catch::Contains("fp8 keys are not supported"));
}

TEMPLATE_TEST_CASE("cumsum and cumprod along an axis", "[ops][scan]", float, double, std::int32_t, __half, bool) {
    using T = TestType;
    const std::int64_t rows = 5, cols = 1003;
    auto [x, v] = random_tensor<T>({rows, cols}, 5, std::is_same_v<T, bool> ? 0 : -1, std::is_same_v<T, bool> ? 2 : (std::is_integral_v<T> ? 3 : 1));
    for (int axis : {1, 0}) {
        INFO("axis " << axis);
        using Out = typename decltype(cumsum(x, axis))::value_type;
        testing::poison_next<Out>({rows, cols}, std::is_integral_v<Out> ? 0x5A : 0xFF);  // -1 is a sum of these
        const auto got = cumsum(x, axis).to_vector();
        const std::int64_t len = axis == 1 ? cols : rows, lines = axis == 1 ? rows : cols;
        std::size_t bad = 0;
        for (std::int64_t l = 0; l < lines; ++l) {
            long double s = 0, mag = 0;
            for (std::int64_t k = 0; k < len; ++k) {
                const std::size_t i = std::size_t(axis == 1 ? l * cols + k : k * cols + l);
                s += convert<double>(T(v[i]));
                mag += std::fabs(convert<double>(T(v[i])));
                // float: sequential-order error ~ k eps |x|; half output: one rounding (2^-11) of values up to ~30.
                const double tol = std::is_same_v<T, double> ? 1e-12 : std::is_same_v<T, float> ? 1e-6 * double(mag) : std::is_same_v<T, __half> ? 2e-3 * std::fabs(double(s)) + 1e-3 : 0;
                bad += !(std::fabs(convert<double>(got[i]) - double(s)) <= tol);
            }
        }
        CHECK(bad == 0);
    }
    if constexpr (std::is_same_v<T, double>) {
        auto [y, w] = random_tensor<double>({3, 41}, 6, 0.9, 1.1);
        testing::poison_next<double>({3, 41});
        const auto p = cumprod(y, 1).to_vector();
        std::size_t bad = 0;
        for (std::int64_t r = 0; r < 3; ++r) {
            double acc = 1;
            for (std::int64_t k = 0; k < 41; ++k) acc *= w[std::size_t(r * 41 + k)], bad += std::fabs(p[std::size_t(r * 41 + k)] - acc) > 1e-13;
        }
        CHECK(bad == 0);
    }
}

TEST_CASE("unique returns the sorted distinct values", "[ops][sort]") {
    auto [x, v] = random_tensor<std::int32_t>({33, 31}, 8, -50, 50);
    std::vector<std::int32_t> want(v);
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    CHECK(unique(x).to_vector() == want);
    CHECK(unique(empty<float>({0})).numel() == 0);
}

TEST_CASE("unique compares with ==, as CUB's DeviceSelect::Unique: -0.0 is 0.0, each NaN stays", "[ops][sort]") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const auto u = unique(from_host<float>({1.f, nan, -0.f, 2.f, nan, 0.f, 1.f, -nan}, {8})).to_vector();
    // Sorted with every NaN last; runs of equal values keep their first.
    REQUIRE(u.size() == 6);
    CHECK((u[0] == 0.f && std::signbit(u[0])));  // the first of -0.0 and 0.0 in the input
    CHECK(u[1] == 1.f);
    CHECK(u[2] == 2.f);
    CHECK((std::isnan(u[3]) && std::isnan(u[4]) && std::isnan(u[5])));
    const auto h = unique(from_host<__half>({__float2half(nan), __float2half(3.f), __float2half(nan)}, {3})).to_vector();
    REQUIRE(h.size() == 3);
    CHECK(float(h[0]) == 3.f);
}
