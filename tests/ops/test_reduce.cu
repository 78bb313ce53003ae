// Reductions against double-precision host loops: every operation, full and per-axis, keepdim,
// strided input views, odd sizes (1, 2, 31, 33, 1000003) that exercise the warp, block, vector,
// column and split paths, empty dims, error messages, bitwise reproducibility. The block each output will take
// from the cache is poisoned just before each reduction, so an unwritten element fails.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <sstream>

#include <tessel/ops/reduce.hpp>

#if defined(TESSEL_BACKEND_CUDA)
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#endif

#include "../reference/elementwise.hpp"
#include "../support/device_array.hpp"
#include "../support/random_tensor.hpp"

using namespace tessel;
using reference::for_each_index;

namespace {

template <class T>
using Input = testing::TensorPair<T>;
using testing::poison_next;

template <class T>
Input<T> random_input(const Shape& s, std::uint64_t seed, double lo = -1, double hi = 1) {
    return testing::random_pair<T>(s, seed, lo, hi);
}

// The reduced shape, and which input dims are reduced.
struct Plan {
    Shape out_shape;
    std::vector<bool> reduced;
};
Plan plan_for(const Shape& in, std::vector<int> axes, bool keepdim) {
    Plan p;
    p.reduced.assign(std::size_t(in.size()), axes.empty());
    for (int a : axes) p.reduced[std::size_t(a < 0 ? a + in.size() : a)] = true;
    for (int d = 0; d < in.size(); ++d)
        if (!p.reduced[std::size_t(d)]) p.out_shape.push_back(in[d]);
        else if (keepdim) p.out_shape.push_back(1);
    return p;
}

// Calls f(out_flat_index, values in reduction order) for every output. The reduced elements lie at
// the same offsets from each output's first element, so those offsets are listed once (the sweeps'
// references took half their time under ASan when every element built an index vector).
template <class T, class F>
void for_each_output(const Tensor<T>& h, const Plan& p, F&& f) {
    const Layout& l = h.layout();
    Shape kept, red, kept_strides, red_strides;
    for (int d = 0; d < h.dim(); ++d) {
        const bool r = p.reduced[std::size_t(d)];
        (r ? red : kept).push_back(h.shape()[d]);
        (r ? red_strides : kept_strides).push_back(l.strides[d]);
    }
    auto offset = [](const std::vector<std::int64_t>& idx, const Shape& strides) {
        std::int64_t o = 0;
        for (std::size_t d = 0; d < idx.size(); ++d) o += idx[d] * strides[int(d)];
        return o;
    };
    std::vector<std::int64_t> red_offsets;
    for_each_index(red, [&](const std::vector<std::int64_t>& ri) { red_offsets.push_back(offset(ri, red_strides)); });
    const T* data = static_cast<const T*>(h.storage()->data());
    std::vector<double> vals(red_offsets.size());
    std::int64_t o = 0;
    for_each_index(kept, [&](const std::vector<std::int64_t>& ki) {
        const std::int64_t first = l.offset + offset(ki, kept_strides);
        for (std::size_t i = 0; i < red_offsets.size(); ++i) vals[i] = convert<double>(data[first + red_offsets[i]]);
        f(o++, vals);
    });
}

template <class Out>
std::vector<double> values_of(const Tensor<Out>& t) {
    std::vector<double> v;
    const Tensor<Out> h = t.to_host();
    for (std::int64_t i = 0; i < h.numel(); ++i) v.push_back(convert<double>(h.data()[i]));
    return v;
}

// Runs `run` (a reduction) on x over `axes` and compares with ref(values) within tol(values).
template <class T, class Run, class Ref, class Tol>
void check_reduction(const std::string& what, const Input<T>& x, std::vector<int> axes, bool keepdim, Run&& run, Ref&& ref,
                     Tol&& tol) {
    const Plan p = plan_for(x.dev.shape(), axes, keepdim);
    using Out = typename decltype(run(x.dev, Axes(axes), keepdim))::value_type;
    // 0x5A bytes: a finite value far from every result here in each type wider than a byte (so an
    // output that should be NaN, as var of one element, shows unwritten too); 0xFF (NaN) for fp8.
    poison_next<Out>(p.out_shape, sizeof(Out) == 1 ? 0xFF : 0x5A);
    const auto got_t = run(x.dev, Axes(axes), keepdim);
    REQUIRE(got_t.shape() == p.out_shape);
    const auto got = values_of(got_t);
    std::size_t bad = 0;
    std::ostringstream os;
    for_each_output(x.host, p, [&](std::int64_t o, const std::vector<double>& vals) {
        const double want = ref(vals), have = got[std::size_t(o)];
        const bool ok = (std::isnan(want) && std::isnan(have)) || std::fabs(have - want) <= tol(vals) || have == want;
        if (!ok && bad++ < 5) os << "\n  output " << o << ": expected " << want << ", got " << have << " (tolerance " << tol(vals) << ")";
    });
    INFO(what << " over " << x.dev.shape().to_string() << " axes " << axes.size() << (keepdim ? " keepdim" : "") << ": " << bad
              << " wrong" << os.str());
    CHECK(bad == 0);
}

// The references accumulate in long double: a double loop over 10^6 terms would itself be off by
// ~sqrt(n) eps |sum|, more than the double tolerance.
double sum_of(const std::vector<double>& v) {
    long double s = 0;
    for (double x : v) s += x;
    return double(s);
}
double abs_sum(const std::vector<double>& v) {
    long double s = 0;
    for (double x : v) s += std::fabs(x);
    return double(s);
}
[[maybe_unused]] double l2_of(const std::vector<double>& v) {  // (the sweeps only: not in the TSan build)
    long double s = 0;
    for (double y : v) s += (long double)y * y;
    return double(std::sqrt(s));
}
double variance(const std::vector<double>& v, int correction) {
    long double m = 0;
    for (double x : v) m += x;
    m /= (long double)v.size();
    long double s = 0;
    for (double x : v) s += (x - m) * (x - m);
    return v.size() > std::size_t(correction) ? double(s / (long double)(v.size() - std::size_t(correction))) : NAN;
}

// mean(x^2): the magnitude the variance's rounding errors scale with.
[[maybe_unused]] double second_moment(const std::vector<double>& v) {
    long double s = 0;
    for (double y : v) s += (long double)y * y;
    return double(s / (long double)v.size());
}

struct Case {
    Shape shape;
    std::vector<int> axes;
    bool keepdim;
};
// Full reductions of odd lengths (warp, block, split and vector paths), rows (warp and block, with
// and without vector loads), columns (with and without splits, outputs over two kept dims), several
// axes, keepdim.
const std::vector<Case> cases = {
    {{1}, {}, false},          {{2}, {}, false},         {{31}, {}, false},         {{33}, {}, false},
    {{testing::large(1000003)}, {}, false}, {{testing::large(1000004)}, {}, false},   {{33, 1031}, {1}, false},  {{33, 1032}, {1}, false},
    {{300, 40}, {-1}, false},  {{33, 1031}, {0}, false}, {{5, 31, 33}, {0, 2}, true}, {{5, 31, 33}, {1}, false},
    {{3, 4, 5, 6}, {0, 1, 2, 3}, true}, {{testing::large(100003), 7}, {0}, false}, {{2, 4001, 33}, {1}, true},
    {{301, 4099}, {1}, false},  // 3 splits each: the second pass walks several outputs per block
    {{1000, 10}, {1}, false},   {{777, 7}, {-1}, true},  // rows shorter than a warp: a thread per output
    {{99, 28}, {1}, false},     // a thread per output with 16-byte loads (28 floats, 14 bf16 pairs)
    {{4097, 3}, {0}, false},    // narrow columns: blocks of 4 outputs (64 slices each), split
    {{1001, 16}, {0}, true},    // blocks of 16 outputs
    {{2, 999, 4}, {1}, false},  // 8 outputs over two kept dims, blocks of 16
};

}  // namespace

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
TEMPLATE_TEST_CASE("sum, mean, norms, var and std match double loops", "[ops][reduce][slow_under_tsan]", float, double, __nv_bfloat16) {
    using T = TestType;
    // Accumulation in float (double for double): the error of n additions is at most about
    // n_eff * eps * sum|x|, n_eff ~ 100 for these trees (200 for a factor 2 of margin); a bf16
    // result adds one rounding of itself (2^-9 of |result|, 2^-8 here). Variances: the merged
    // moments carry n_eff * eps relative to the second moment mean(x^2) (x20 for the merges' extra
    // operations), so a wrong correction (n for n - 1, a change of 1/n) fails wherever 1/n is above
    // the bound: rows of up to ~250 values in bf16 (2^-8), ~4000 in float. The test after this one
    // checks sums exactly.
    const double eps = std::is_same_v<T, double> ? 1e-16 : 6e-8;
    const double out_rel = std::is_same_v<T, __nv_bfloat16> ? 1.0 / 256 : 0;
    for (const Case& c : cases) {
        auto x = random_input<T>(c.shape, std::uint64_t(c.shape.size() * 1000 + c.shape[0]));
        // Accumulation over magnitude `acc`, then one rounding of a result of magnitude `result`.
        auto tol = [&](double acc, double result) { return 200 * eps * acc + out_rel * std::fabs(result) + 1e-30; };
        check_reduction("sum", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return sum(t, a, k); }, sum_of,
                        [&](const auto& v) { return tol(abs_sum(v), sum_of(v)); });
        check_reduction("mean", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return mean(t, a, k); },
                        [](const auto& v) { return sum_of(v) / double(v.size()); },
                        [&](const auto& v) { return tol(abs_sum(v) / double(v.size()), sum_of(v) / double(v.size())); });
        check_reduction("norm l1", x, c.axes, c.keepdim,
                        [](const auto& t, const Axes& a, bool k) { return norm(t, ops::NormOrder::l1, a, k); }, abs_sum,
                        [&](const auto& v) { return tol(abs_sum(v), abs_sum(v)); });
        check_reduction("norm l2", x, c.axes, c.keepdim,
                        [](const auto& t, const Axes& a, bool k) { return norm(t, ops::NormOrder::l2, a, k); },
                        l2_of,
                        [&](const auto& v) { return tol(l2_of(v), l2_of(v)); });  // squares add with no cancellation
        check_reduction("norm inf", x, c.axes, c.keepdim,
                        [](const auto& t, const Axes& a, bool k) { return norm(t, ops::NormOrder::inf, a, k); },
                        [](const auto& v) {
                            double m = 0;
                            for (double y : v) m = std::max(m, std::fabs(y));
                            return m;
                        },
                        [](const auto&) { return 0.0; });
        check_reduction("var", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return var(t, a, 1, k); },
                        [](const auto& v) { return variance(v, 1); },
                        [&](const auto& v) { return tol(20 * second_moment(v), variance(v, 1)) + 1e-12; });
        check_reduction("stddev (population)", x, c.axes, c.keepdim,
                        [](const auto& t, const Axes& a, bool k) { return stddev(t, a, 0, k); },
                        [](const auto& v) { return std::sqrt(variance(v, 0)); },
                        [&](const auto& v) { return tol(20 * std::sqrt(second_moment(v)), std::sqrt(variance(v, 0))) + 1e-12; });
    }
}
#endif  // TESSEL_TEST_UNDER_TSAN

// Multiples of 1/16 in [-1, 1]: every partial sum of up to 2^20 of them is exact in float, so a
// sum in any order must equal the reference exactly, and an element dropped or added twice shows
// (the tolerances above are wider than one element for the largest sums).
template <class T>
Input<T> exactly_summable(const Shape& s, std::uint64_t seed) {
    const auto r = testing::random_vector<double>(std::size_t(Layout::contiguous(s).numel()), seed, -16, 17);
    std::vector<T> v(r.size());
    for (std::size_t i = 0; i < r.size(); ++i) v[i] = T(std::floor(r[i]) / 16);
    return {from_host<T>(std::span<const T>(v), s), from_host<T>(std::span<const T>(v), s, {.space = MemorySpace::host})};
}

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
TEMPLATE_TEST_CASE("sums of multiples of 1/16 are exact on every path", "[ops][reduce][slow_under_tsan]", float, double) {
    using T = TestType;
    for (const Case& c : cases) {
        const Plan p = plan_for(c.shape, c.axes, false);
        std::int64_t reduced = 1;  // values per output: every partial sum stays within 2^20
        for (int d = 0; d < c.shape.size(); ++d) reduced *= p.reduced[std::size_t(d)] ? c.shape[d] : 1;
        REQUIRE(reduced <= (1 << 20));
        const auto x = exactly_summable<T>(c.shape, std::uint64_t(c.shape.size() * 77 + c.shape[0]));
        const auto exact = [](const auto&) { return 0.0; };
        check_reduction("sum", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return sum(t, a, k); }, sum_of, exact);
        check_reduction("norm l1", x, c.axes, c.keepdim,
                        [](const auto& t, const Axes& a, bool k) { return norm(t, ops::NormOrder::l1, a, k); }, abs_sum, exact);
    }
}

// fp8 (e4m3) too: 16 values a 16-byte load (the only float type of 1 byte), and values of
// [-100, 100] on its coarse grid make ties everywhere.
TEMPLATE_TEST_CASE("amax, amin, argmax, argmin are exact; prod; all and any", "[ops][reduce][slow_under_tsan]", float, __nv_bfloat16, __half,
                   std::int32_t, __nv_fp8_e4m3) {
    using T = TestType;
    for (const Case& c : cases) {
        auto x = random_input<T>(c.shape, std::uint64_t(c.shape[0] * 7 + c.axes.size()), -100, 100);
        auto exact = [](const auto&) { return 0.0; };
        check_reduction("amax", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return amax(t, a, k); },
                        [](const auto& v) { return *std::max_element(v.begin(), v.end()); }, exact);
        check_reduction("amin", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return amin(t, a, k); },
                        [](const auto& v) { return *std::min_element(v.begin(), v.end()); }, exact);
        check_reduction("argmax (first of ties)", x, c.axes, c.keepdim,
                        [](const auto& t, const Axes& a, bool k) { return argmax(t, a, k); },
                        [](const auto& v) { return double(std::max_element(v.begin(), v.end()) - v.begin()); }, exact);
        check_reduction("argmin (first of ties)", x, c.axes, c.keepdim,
                        [](const auto& t, const Axes& a, bool k) { return argmin(t, a, k); },
                        [](const auto& v) { return double(std::min_element(v.begin(), v.end()) - v.begin()); }, exact);
        check_reduction("any", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return any(t, a, k); },
                        [](const auto& v) { return double(std::any_of(v.begin(), v.end(), [](double y) { return y != 0; })); }, exact);
        check_reduction("all", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return all(t, a, k); },
                        [](const auto& v) { return double(std::all_of(v.begin(), v.end(), [](double y) { return y != 0; })); }, exact);
    }
    // Products of values near 1 stay finite for a few thousand elements.
    auto y = random_input<T>({7, 33}, 5, std::is_integral_v<T> ? -1 : 0.9, std::is_integral_v<T> ? 3 : 1.1);
    check_reduction("prod", y, {1}, false, [](const auto& t, const Axes& a, bool k) { return prod(t, a, k); },
                    [](const auto& v) {
                        double p = 1;
                        for (double e : v) p *= e;
                        return p;
                    },
                    [](const auto& v) {
                        double p = 1;
                        for (double e : v) p *= std::fabs(e);
                        // One rounding of the float product to the output: 2^-8 bf16, 2^-11 half, 2^-4 e4m3.
                        return (std::is_same_v<T, __nv_bfloat16> ? 1.0 / 128 : std::is_same_v<T, __half> ? 1.0 / 1024
                                : std::is_same_v<T, __nv_fp8_e4m3> ? 1.0 / 16 : std::is_integral_v<T> ? 0 : 1e-5) * p;
                    });
}

// Values drawn from {NaN, -inf, -1, 0, 1, inf} (NaN rare), so every output has ties, most hold
// infinities and some a NaN, placed anywhere within a vector load or a thread's group of strided
// elements: argmax and argmin follow torch (a NaN is the extremum, the first of ties wins).
TEMPLATE_TEST_CASE("argmax and argmin with NaNs, infinities and ties on every path", "[ops][reduce][slow_under_tsan]", float, __nv_bfloat16,
                   double) {
    using T = TestType;
    const double inf = std::numeric_limits<double>::infinity();
    auto first_of = [](bool max) {
        return [max](const std::vector<double>& v) {
            std::size_t best = 0;
            for (std::size_t i = 1; i < v.size(); ++i) {
                if (std::isnan(v[best])) break;
                if (std::isnan(v[i]) || (max ? v[i] > v[best] : v[i] < v[best])) best = i;
            }
            return double(best);
        };
    };
    auto exact = [](const auto&) { return 0.0; };
    for (const Case& c : cases) {
        auto u = random_input<double>(c.shape, std::uint64_t(c.shape[0] * 13 + 1), 0, 1);
        std::vector<T> v(std::size_t(u.host.numel()));
        for (std::size_t i = 0; i < v.size(); ++i) {
            const double r = u.host.data()[i];
            const double x = r < 0.002 ? NAN : r < 0.2 ? -inf : r < 0.4 ? -1 : r < 0.6 ? 0 : r < 0.8 ? 1 : inf;
            v[i] = ops::cast<T>(x);
        }
        const Input<T> x{from_host<T>(std::span<const T>(v), c.shape), from_host<T>(std::span<const T>(v), c.shape, {.space = MemorySpace::host})};
        check_reduction("argmax", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return argmax(t, a, k); }, first_of(true), exact);
        check_reduction("argmin", x, c.axes, c.keepdim, [](const auto& t, const Axes& a, bool k) { return argmin(t, a, k); }, first_of(false), exact);
    }
    // Rows of only -inf (argmax 0) and only +inf (argmin 0), through the vector, one-at-a-time and
    // column paths.
    for (std::int64_t n : {1, 7, 8, 33, 1024}) {
        for (double fill : {-inf, inf}) {
            const auto row = full<T>({3, n}, ops::cast<T>(fill));
            const auto got = (fill < 0 ? argmax(row, {1}) : argmin(row, {1})).to_vector();
            CHECK(got == std::vector<std::int64_t>(3, 0));
            const auto column = full<T>({n, 3}, ops::cast<T>(fill));  // the column kernel
            const auto col = (fill < 0 ? argmax(column, {0}) : argmin(column, {0})).to_vector();
            CHECK(col == std::vector<std::int64_t>(3, 0));
        }
    }
}
#endif  // TESSEL_TEST_UNDER_TSAN

// A fold of a group scales each value before adding (no overflow to inf), as Welford's
// per-element update never summed them, and adds the scaled values pairwise, so that equal values
// give their own value as the mean exactly: 0.1f and 1.1f use all 24 bits of float's significand,
// and a running sum of 16 of them divided by 16 rounds (var 2e-16, not 0). Lengths take every path:
// one thread per row (3, 4, 8), a warp (512: a group of 16 per lane), the block (4096, 4099), the
// column kernel, and the whole tensor.
TEMPLATE_TEST_CASE("var of equal values is 0 in every path and near the type's largest", "[ops][reduce]", float, double) {
    using T = TestType;
    for (const T value : testing::sweep_cases({T(0.1), T(1.1), T(std::numeric_limits<T>::max() * 0.75)})) {
        for (std::int64_t n : testing::sweep_cases<std::int64_t>({3, 4, 8, 512, 1000, 1003, 4096, 4099})) {
            INFO("value " << value << ", n " << n);
            const auto x = full<T>({2, n}, value);
            for (double v : var(x, {1}).to_vector()) CHECK(v == 0.0);
            for (double v : var(full<T>({n, 3}, value), {0}).to_vector()) CHECK(v == 0.0);  // the column kernel
            CHECK(double(var(x).item()) == 0.0);
            CHECK(double(stddev(x).item()) == 0.0);
        }
    }
}

TEST_CASE("integer and bool sums widen to int64; Welford var survives a large mean", "[ops][reduce]") {
    auto big = full<std::int32_t>({100003}, 2'000'000'000);
    const auto s = sum(big);
    STATIC_REQUIRE(std::is_same_v<decltype(s)::value_type, std::int64_t>);
    CHECK(s.item() == std::int64_t(100003) * 2'000'000'000);
    auto b = random_input<bool>({1031}, 9);
    std::int64_t trues = 0;
    for (std::int64_t i = 0; i < 1031; ++i) trues += b.host.data()[i];
    CHECK(sum(b.dev).item() == trues);

    // Values 1e4 + U(-1, 1) in float: a one-pass sum of squares would lose all digits of the variance.
    const std::int64_t n = testing::large(1000003);
    auto x = random_input<float>({n}, 10);
    auto shifted = evaluate(x.dev + 1e4f);
    const double got = var(shifted).item();
    std::vector<double> hv;
    for (std::int64_t i = 0; i < n; ++i) hv.push_back(double(float(x.host.data()[i] + 1e4f)));
    const double want = variance(hv, 1);
    CHECK(std::fabs(got - want) <= 1e-3 * want);
}

TEST_CASE("reductions of empty dims, strided views, errors, reproducibility", "[ops][reduce]") {
    auto e = empty<float>({4, 0});
    CHECK(sum(e, {1}).to_vector() == std::vector<float>(4, 0.f));
    poison_next<float>({4}, 0x5A);  // finite: the NaN must be written
    for (float m : mean(e, {1}).to_vector()) CHECK(std::isnan(m));
    CHECK(prod(e, {1}).to_vector() == std::vector<float>(4, 1.f));
    CHECK_THROWS_WITH(amax(e, {1}), Catch::Contains("amax") && Catch::Contains("empty"));
    CHECK(sum(e, {0}).numel() == 0);
    auto x = random_input<float>({31, 33}, 11);
    CHECK_THROWS_WITH(sum(x.dev, {2}), Catch::Contains("axis 2 out of range") && Catch::Contains("[31, 33]"));
    CHECK_THROWS_WITH(sum(x.dev, {1, -1}), Catch::Contains("given twice"));
    // A 0-d tensor reduces over axis 0 or -1 (torch wraps its dims as if it had one); not over 1 or -2.
    const auto scalar = full<float>({}, 3.f);
    CHECK(sum(scalar, {-1}).item() == 3.f);
    CHECK(sum(scalar, {0}).item() == 3.f);
    CHECK_THROWS_WITH(sum(scalar, {-2}), Catch::Contains("axis -2 out of range"));
    CHECK_THROWS_WITH(sum(scalar, {0, -1}), Catch::Contains("given twice"));
    // A correction of n or more divides by 0, as torch's max(0, n - correction): inf, or NaN when
    // the values are all equal (0 / 0).
    CHECK(std::isinf(var(from_host<float>({1.f, 2.f}, {2}), {}, 2).item()));
    CHECK(std::isinf(var(from_host<float>({1.f, 2.f}, {2}), {}, 5).item()));
    poison_next<float>({}, 0x5A);
    CHECK(std::isnan(var(from_host<float>({4.f, 4.f}, {2}), {}, 2).item()));
    CHECK(var(from_host<float>({1.f, 2.f}, {2}), {}, 1).item() == 0.5f);
    // A fractional correction, as torch's: sum of squared deviations 2 over 3 - 0.5 values, and
    // over max(0, 3 - 3.5) = 0 values (inf); the standard deviation its square root.
    poison_next<float>({}, 0x5A);
    CHECK(var(from_host<float>({1.f, 2.f, 3.f}, {3}), {}, 0.5).item() == 0.8f);
    CHECK(std::isinf(var(from_host<float>({1.f, 2.f, 3.f}, {3}), {}, 3.5).item()));
    poison_next<double>({}, 0x5A);
    CHECK(stddev(from_host<double>({1.0, 2.0, 3.0}, {3}), {}, 1.5).item() == std::sqrt(2.0 / 1.5));
    CHECK_THROWS_WITH(var(x.dev, {}, std::nan("")), Catch::Contains("var: correction nan must be finite"));
    CHECK_THROWS_WITH(sum(x.host), Catch::Contains("host memory"));

    // A transposed and a sliced view.
    Input<float> t{x.dev.transpose(0, 1), x.host.transpose(0, 1)};
    check_reduction("sum of a transposed view", t, {1}, false, [](const auto& v, const Axes& a, bool k) { return sum(v, a, k); },
                    sum_of, [](const auto& v) { return 1e-5 * abs_sum(v); });
    Input<float> s{x.dev.slice(1, 1, 33, 3), x.host.slice(1, 1, 33, 3)};
    check_reduction("argmax of a sliced view", s, {0}, true, [](const auto& v, const Axes& a, bool k) { return argmax(v, a, k); },
                    [](const auto& v) { return double(std::max_element(v.begin(), v.end()) - v.begin()); },
                    [](const auto&) { return 0.0; });

    // A full reduction of a rank-8 view whose dims do not merge (strides 1, 2, 4, ... after the permute).
    auto r8 = random_input<float>({3, 2, 2, 2, 2, 2, 2, 2}, 13);
    Input<float> p8{r8.dev.permute({7, 6, 5, 4, 3, 2, 1, 0}), r8.host.permute({7, 6, 5, 4, 3, 2, 1, 0})};
    check_reduction("sum of a rank-8 view", p8, {}, false, [](const auto& v, const Axes& a, bool k) { return sum(v, a, k); }, sum_of,
                    [](const auto& v) { return 1e-5 * abs_sum(v); });
    check_reduction("argmax of a rank-8 view", p8, {}, false, [](const auto& v, const Axes& a, bool k) { return argmax(v, a, k); },
                    [](const auto& v) { return double(std::max_element(v.begin(), v.end()) - v.begin()); },
                    [](const auto&) { return 0.0; });

    // Same input, same bits, every time (no atomics; the order depends on the shape only).
    auto y = random_input<float>({testing::large(1000003)}, 12);
    const float first = sum(y.dev).item();
    const float again = sum(y.dev).item();
    CHECK(std::memcmp(&first, &again, sizeof(float)) == 0);
}

TEMPLATE_TEST_CASE("var and std of values holding an infinity are NaN whatever the size and path", "[ops][reduce]", float, double) {
    // torch's answer (the deviations inf - inf are NaN); the pairwise merge alone gave inf or NaN
    // depending on where the infinities fell in the reduction tree.
    using T = TestType;
    const T inf = std::numeric_limits<T>::infinity();
    std::mt19937_64 rng(41);
    for (std::int64_t n : testing::sweep_cases<std::int64_t>({2, 3, 4, 31, 33, 1000, 10001, 70001})) {
        std::vector<T> v = testing::random_vector<T>(std::size_t(n), std::uint64_t(n));
        const std::size_t at = std::size_t(rng() % std::uint64_t(n));
        v[at] = (n % 2 != 0) ? -inf : inf;
        INFO("n = " << n << ", infinity at " << at);
        const auto x = from_host<T>(std::span<const T>(v), Shape{n});
        poison_next<T>({}, 0x5A);  // the NaN must be written: the poison is finite
        CHECK(std::isnan(double(var(x).item())));
        poison_next<T>({}, 0x5A);
        CHECK(std::isnan(double(stddev(x, {}, 0).item())));
        // Rows of a [3, n] matrix, only the middle one holding the infinity (a row of finite values keeps its variance).
        std::vector<T> rows(std::size_t(3 * n), T(1));
        rows[std::size_t(n) + at] = inf;
        rows[std::size_t(2 * n)] = T(3);  // the last row: one 3 among 1s, variance 4 / n
        const auto rows_dev = from_host<T>(std::span<const T>(rows), Shape{3, n});
        poison_next<T>({3}, 0x5A);
        const auto per_row = var(rows_dev, {1}).to_vector();
        CHECK(per_row[0] == T(0));
        CHECK(std::isnan(double(per_row[1])));
        CHECK(std::fabs(double(per_row[2]) - 4.0 / double(n)) <= 1e-5 * 4.0 / double(n));
    }
    // Finite values whose spread overflows T: inf, as torch's (not NaN: no value is infinite), also
    // where groups whose means are far apart merge (their difference overflows) before later ones.
    const T big = std::numeric_limits<T>::max() * T(0.9);
    CHECK(std::isinf(double(var(from_host<T>({big, -big, big}, {3})).item())));
    for (std::int64_t n : testing::sweep_cases<std::int64_t>({16, 17, 1025, 4096})) {
        std::vector<T> v(std::size_t(n), T(0));
        for (std::int64_t i = 0; i < n; ++i) {
            if (n < 100) v[std::size_t(i)] = i < 4 ? -big : i < 8 ? big : T(0);
            else v[std::size_t(i)] = i % 2 ? big : -big;
        }
        INFO("n = " << n);
        CHECK(std::isinf(double(var(from_host<T>(std::span<const T>(v), Shape{n})).item())));
        std::vector<T> rows(v);
        rows.insert(rows.end(), v.begin(), v.end());
        for (double r : var(from_host<T>(std::span<const T>(rows), Shape{2, n}), {1}).to_vector()) CHECK(std::isinf(r));
        std::vector<T> columns;  // [n, 2]: the column kernel
        for (T e : v) columns.insert(columns.end(), {e, e});
        for (double c : var(from_host<T>(std::span<const T>(columns), Shape{n, 2}), {0}).to_vector()) CHECK(std::isinf(c));
    }
}

// Host values of an expression, computed in double from the inputs' host copies, as an Input whose
// device side only carries the shape.
template <class F>
Input<float> expression_values(const Shape& shape, F&& value_at) {
    Tensor<float> h = empty<float>(shape, {.space = MemorySpace::host});
    std::int64_t i = 0;
    for_each_index(shape, [&](const std::vector<std::int64_t>& idx) { h.data()[i++] = float(value_at(idx)); });
    return {empty<float>(shape), h};
}

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
// (The warp shuffles of ~2000 outputs are slow with OS-thread blocks: the race check runs the light
// case below instead.)
TEST_CASE("reductions of expressions are fused: one pass, nothing materialised", "[ops][reduce][slow_under_tsan]") {
    auto a = random_input<float>({33, 1031}, 21), b = random_input<float>({1031}, 22), c = random_input<float>({33, 1031}, 23);
    auto tol = [](const std::vector<double>& v) { return 200 * 6e-8 * abs_sum(v) + 1e-30; };
    const auto A = [&](std::int64_t i, std::int64_t j) { return double(a.host.data()[i * 1031 + j]); };
    const auto B = [&](std::int64_t j) { return double(b.host.data()[j]); };
    const auto C = [&](std::int64_t i, std::int64_t j) { return double(c.host.data()[i * 1031 + j]); };

    // a * b + c with b broadcast over rows, over each axis and over everything (the split path).
    auto fma = expression_values({33, 1031}, [&](const auto& x) { return A(x[0], x[1]) * B(x[1]) + C(x[0], x[1]); });
    for (std::vector<int> axes : {std::vector<int>{}, {0}, {1}}) {
        check_reduction("sum(a * b + c)", fma, axes, false, [&](const auto&, const Axes& ax, bool k) { return sum(a.dev * b.dev + c.dev, ax, k); },
                        sum_of, tol);
        check_reduction("var(a * b + c)", fma, axes, true, [&](const auto&, const Axes& ax, bool k) { return var(a.dev * b.dev + c.dev, ax, 1, k); },
                        [](const auto& v) { return variance(v, 1); }, [&](const auto& v) { return 200 * 6e-8 * 20 * variance(v, 0) + 1e-12; });
    }
    // Squared differences of a transposed view: the strided (coordinate) evaluation.
    auto sq = expression_values({1031, 33}, [&](const auto& x) { return (A(x[1], x[0]) - C(x[1], x[0])) * (A(x[1], x[0]) - C(x[1], x[0])); });
    const auto at = a.dev.transpose(0, 1), ct = c.dev.transpose(0, 1);
    check_reduction("mean((a' - c')^2)", sq, {1}, false, [&](const auto&, const Axes& ax, bool k) { return mean((at - ct) * (at - ct), ax, k); },
                    [](const auto& v) { return sum_of(v) / double(v.size()); }, [&](const auto& v) { return tol(v) / double(v.size()); });
    // Exact ones: the largest magnitude and where it is.
    auto mag = expression_values({33, 1031}, [&](const auto& x) { return std::fabs(A(x[0], x[1]) - 0.5); });
    check_reduction("amax(abs(a - 0.5))", mag, {1}, false, [&](const auto&, const Axes& ax, bool k) { return amax(abs(a.dev - 0.5f), ax, k); },
                    [](const auto& v) { return *std::max_element(v.begin(), v.end()); }, [](const auto&) { return 0.0; });
    check_reduction("argmax(abs(a - 0.5))", mag, {0}, false, [&](const auto&, const Axes& ax, bool k) { return argmax(abs(a.dev - 0.5f), ax, k); },
                    [](const auto& v) { return double(std::max_element(v.begin(), v.end()) - v.begin()); }, [](const auto&) { return 0.0; });

    // One launch (no split for 33 outputs of 1031) and no temporary of the expression's size.
    const auto before = testing::launch_count();
    const auto rows = sum(a.dev * b.dev + c.dev, {1});
    if (backend == Backend::sim) CHECK(testing::launch_count() - before == 1);
    CHECK(rows.numel() == 33);
    CHECK_THROWS_WITH(sum(a.dev * a.host), Catch::Contains("operand 1") && Catch::Contains("host memory"));
    CHECK_THROWS_WITH(sum(a.dev * b.dev, {2}), Catch::Contains("axis 2 out of range"));
}
#endif  // TESSEL_TEST_UNDER_TSAN

TEST_CASE("a fused reduction, small enough for the race check", "[ops][reduce]") {
    auto a = random_input<float>({5, 67}, 31), b = random_input<float>({67}, 32);
    auto prod = expression_values({5, 67}, [&](const auto& x) { return double(a.host.data()[x[0] * 67 + x[1]]) * b.host.data()[x[1]]; });
    for (std::vector<int> axes : {std::vector<int>{}, {1}})
        check_reduction("sum(a * b)", prod, axes, false, [&](const auto&, const Axes& ax, bool k) { return sum(a.dev * b.dev, ax, k); },
                        sum_of, [](const auto& v) { return 200 * 6e-8 * abs_sum(v) + 1e-30; });
}

// Column reductions light enough for the race check, with more work items than the sim's grid
// has blocks (2 per simulated SM), so blocks reuse their shared memory: 40 columns of 600 split 5
// ways (10 items of reduce_columns, then 40 outputs for reduce_partials), 3 columns of 600 (blocks
// of 4 outputs, 5 items).
TEST_CASE("column reductions with several items per block", "[ops][reduce]") {
    for (const Shape& shape : {Shape{600, 40}, Shape{600, 3}}) {
        auto x = random_input<float>(shape, std::uint64_t(shape[1]));
        check_reduction("sum over rows", x, {0}, false, [](const auto& t, const Axes& a, bool k) { return sum(t, a, k); }, sum_of,
                        [](const auto& v) { return 200 * 6e-8 * abs_sum(v) + 1e-30; });
        check_reduction("argmax over rows", x, {0}, false, [](const auto& t, const Axes& a, bool k) { return argmax(t, a, k); },
                        [](const auto& v) { return double(std::max_element(v.begin(), v.end()) - v.begin()); },
                        [](const auto&) { return 0.0; });
    }
}

// The kernels run() launches, finished before the count is returned (a process that exits with a
// launch in flight is not what these tests are about).
template <class F>
std::uint64_t launches_of(F&& run) {
    const auto before = testing::launch_count();
    run();
    const auto count = testing::launch_count() - before;
    rt::device_synchronize();
    return count;
}

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
// With the piece limit lowered to 1000 elements (ops/pieces.hpp), reductions run as they would on
// tensors of 2^31 elements or more: pieces of whole outputs while an output's elements fit in one
// (a launch per piece), else pieces inside each output whose partial accumulators one last launch
// combines (mean divides by the whole K, argmax counts positions from the output's first element,
// Welford states merge across pieces). Tolerances as in the sweep above (float: 200 ulps of the
// absolute sum); extremum positions are exact. Not under ThreadSanitizer: its hundreds of launches
// took 29 s there, and the pieces are host-side bookkeeping around kernels the race check runs
// in the tests above.
TEST_CASE("reductions over the piece limit run as several launches", "[ops][reduce][pieces][slow_under_tsan]") {
    const ops::detail::PieceLimitForTesting limit(1000);
    auto sum_tol = [](const std::vector<double>& v) { return 200 * 6e-8 * abs_sum(v) + 1e-30; };
    auto first_max = [](const auto& v) { return double(std::max_element(v.begin(), v.end()) - v.begin()); };
    auto exact = [](const auto&) { return 0.0; };
    {  // rows of 129: 7 outputs (903 elements) a piece, one launch each
        auto x = random_input<float>({37, 129}, 41);
        check_reduction("sum of rows", x, {1}, false, [](const auto& t, const Axes& a, bool k) { return sum(t, a, k); }, sum_of, sum_tol);
        check_reduction("argmax of rows", x, {1}, true, [](const auto& t, const Axes& a, bool k) { return argmax(t, a, k); }, first_max, exact);
        if (backend == Backend::sim) CHECK(launches_of([&] { (void)sum(x.dev, {1}); }) == (37 + 6) / 7);
    }
    {  // columns of 129 over two kept dims [3, 13] that do not merge (rows of 16): 7 columns a piece
        auto base = random_input<float>({129, 3, 16}, 42);
        Input<float> x{base.dev.slice(2, 0, 13), base.host.slice(2, 0, 13)};
        check_reduction("sum of columns", x, {0}, false, [](const auto& t, const Axes& a, bool k) { return sum(t, a, k); }, sum_of, sum_tol);
        check_reduction("argmin of columns", x, {0}, false, [](const auto& t, const Axes& a, bool k) { return argmin(t, a, k); },
                        [](const auto& v) { return double(std::min_element(v.begin(), v.end()) - v.begin()); }, exact);
    }
    {  // one output of 4100 (vector loads): 5 pieces of at most 992, then the combination
        auto x = random_input<float>({4100}, 43);
        check_reduction("sum", x, {}, false, [](const auto& t, const Axes& a, bool k) { return sum(t, a, k); }, sum_of, sum_tol);
        check_reduction("mean", x, {}, false, [](const auto& t, const Axes& a, bool k) { return mean(t, a, k); },
                        [](const auto& v) { return sum_of(v) / double(v.size()); }, [&](const auto& v) { return sum_tol(v) / double(v.size()); });
        check_reduction("var", x, {}, false, [](const auto& t, const Axes& a, bool k) { return var(t, a, 1, k); },
                        [](const auto& v) { return variance(v, 1); }, [](const auto& v) { return 200 * 6e-8 * 20 * variance(v, 0) + 1e-12; });
        check_reduction("argmax", x, {}, false, [](const auto& t, const Axes& a, bool k) { return argmax(t, a, k); }, first_max, exact);
        if (backend == Backend::sim) CHECK(launches_of([&] { (void)sum(x.dev); }) == (4100 + 991) / 992 + 1);
    }
    {  // three outputs of 3000 bf16 (8 to a vector), and their columns' transpose (strided rows)
        auto x = random_input<__nv_bfloat16>({3, 3000}, 44);
        check_reduction("argmax of long rows", x, {1}, false, [](const auto& t, const Axes& a, bool k) { return argmax(t, a, k); }, first_max,
                        exact);
        check_reduction("sum of long rows", x, {-1}, true, [](const auto& t, const Axes& a, bool k) { return sum(t, a, k); }, sum_of,
                        [](const auto& v) { return (200 * 6e-8 + 1.0 / 256) * abs_sum(v) + 1e-30; });  // float sums, one bf16 rounding
        Input<__nv_bfloat16> t{x.dev.transpose(0, 1), x.host.transpose(0, 1)};
        check_reduction("argmax of long columns", t, {0}, false, [](const auto& v, const Axes& a, bool k) { return argmax(v, a, k); },
                        first_max, exact);
    }
    {  // outputs of 2000 over two reduced dims that do not merge ([40, 50] with strides 3 and 120):
       // pieces of 20 x 50, positions counted over the reduced dims in row-major order
        auto base = random_input<float>({50, 40, 3}, 48);
        Input<float> x{base.dev.permute({2, 1, 0}), base.host.permute({2, 1, 0})};
        check_reduction("sum over strided dims", x, {1, 2}, false, [](const auto& t, const Axes& a, bool k) { return sum(t, a, k); }, sum_of,
                        sum_tol);
        check_reduction("argmax over strided dims", x, {1, 2}, false, [](const auto& t, const Axes& a, bool k) { return argmax(t, a, k); },
                        first_max, exact);
    }
    {  // outputs of no elements: pieces of the outputs alone
        auto e = empty<float>({1500, 0});
        CHECK(sum(e, {1}).to_vector() == std::vector<float>(1500, 0.f));
    }
    {  // fused expressions: rows of 129 (pieces of outputs) and one output of 4099 (pieces inside it)
        auto a = random_input<float>({37, 129}, 45), b = random_input<float>({129}, 46);
        auto ab = expression_values({37, 129}, [&](const auto& i) { return double(a.host.data()[i[0] * 129 + i[1]]) * b.host.data()[i[1]]; });
        check_reduction("sum(a * b) of rows", ab, {1}, false, [&](const auto&, const Axes& ax, bool k) { return sum(a.dev * b.dev, ax, k); },
                        sum_of, sum_tol);
        auto y = random_input<float>({4099}, 47);
        auto mag = expression_values({4099}, [&](const auto& i) { return std::fabs(double(y.host.data()[i[0]]) - 0.5); });
        check_reduction("argmax(abs(y - 0.5))", mag, {}, false, [&](const auto&, const Axes& ax, bool k) { return argmax(abs(y.dev - 0.5f), ax, k); },
                        first_max, exact);
        check_reduction("sum(abs(y - 0.5))", mag, {}, false, [&](const auto&, const Axes& ax, bool k) { return sum(abs(y.dev - 0.5f), ax, k); },
                        sum_of, sum_tol);
    }
}

// With a limit of 5000 the pieces are long enough to be split (pieces of at least 2048 elements
// each, docs/expressions.md): outputs of 4500 a piece each, split 3 ways and combined within the
// piece; outputs of 12000 in pieces of 4992, 4992 and 2016 elements, split 3, 3 and 1 ways, all 7
// partials of an output combined by the last launch. Not under ThreadSanitizer (11 s there), as above.
TEST_CASE("split pieces of reductions over the piece limit", "[ops][reduce][pieces][slow_under_tsan]") {
    const ops::detail::PieceLimitForTesting limit(5000);
    auto sum_tol = [](const std::vector<double>& v) { return 200 * 6e-8 * abs_sum(v) + 1e-30; };
    auto first_max = [](const auto& v) { return double(std::max_element(v.begin(), v.end()) - v.begin()); };
    for (const std::int64_t k : {4500, 12000}) {
        auto x = random_input<float>({2, k}, std::uint64_t(k));
        check_reduction("sum", x, {1}, false, [](const auto& t, const Axes& a, bool kd) { return sum(t, a, kd); }, sum_of, sum_tol);
        check_reduction("argmax", x, {1}, false, [](const auto& t, const Axes& a, bool kd) { return argmax(t, a, kd); }, first_max,
                        [](const auto&) { return 0.0; });
        check_reduction("var", x, {1}, false, [](const auto& t, const Axes& a, bool kd) { return var(t, a, 1, kd); },
                        [](const auto& v) { return variance(v, 1); }, [](const auto& v) { return 200 * 6e-8 * 20 * variance(v, 0) + 1e-12; });
        // 4500: a piece per output, each a split launch and its combination; 12000: 3 pieces per output and the combination.
        if (backend == Backend::sim) CHECK(launches_of([&] { (void)sum(x.dev, {1}); }) == (k == 4500 ? 2 * 2 : 2 * 3 + 1));
    }
}
#endif  // TESSEL_TEST_UNDER_TSAN

#if defined(TESSEL_BACKEND_CUDA)
// On a GPU: tessel's sums next to CUB's on the same inputs, both within the float bound of the
// long-double reference (CUB's order differs, so the two need not agree bit for bit).
TEST_CASE("sums agree with CUB DeviceReduce and DeviceSegmentedReduce", "[ops][reduce][cub]") {
    auto x = testing::random_pair<float>({1031, 1033}, 21);
    const std::int64_t n = x.dev.numel(), rows = 1031, cols = 1033;
    auto cub_total = empty<float>({});
    auto cub_rows = empty<float>({rows});
    const rt::stream_t s = current_stream().handle();
    std::size_t bytes = 0;
    TESSEL_CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, bytes, x.dev.data(), cub_total.data(), n, s));
    void* temp = memory::allocate(bytes, s);
    TESSEL_CUDA_CHECK(cub::DeviceReduce::Sum(temp, bytes, x.dev.data(), cub_total.data(), n, s));
    memory::deallocate(temp);
    std::vector<int> off(static_cast<std::size_t>(rows + 1));
    for (std::size_t r = 0; r < off.size(); ++r) off[r] = int(std::int64_t(r) * cols);
    const auto offsets = from_host<int>(std::span<const int>(off), {rows + 1});
    TESSEL_CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(nullptr, bytes, x.dev.data(), cub_rows.data(), int(rows), offsets.data(),
                                                      offsets.data() + 1, s));
    temp = memory::allocate(bytes, s);
    TESSEL_CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(temp, bytes, x.dev.data(), cub_rows.data(), int(rows), offsets.data(),
                                                      offsets.data() + 1, s));
    memory::deallocate(temp);

    std::vector<double> all(x.host.data(), x.host.data() + n);
    const double want = sum_of(all), bound = 200 * 6e-8 * abs_sum(all);
    CHECK(std::fabs(double(sum(x.dev).item()) - want) <= bound);
    CHECK(std::fabs(double(cub_total.item()) - want) <= bound);
    const auto ours = sum(x.dev, {1}).to_vector(), theirs = cub_rows.to_vector();
    std::size_t bad = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
        const std::vector<double> row(all.begin() + r * cols, all.begin() + (r + 1) * cols);
        const double w = sum_of(row), b = 200 * 6e-8 * abs_sum(row);
        bad += std::fabs(ours[std::size_t(r)] - w) > b || std::fabs(theirs[std::size_t(r)] - w) > b;
    }
    CHECK(bad == 0);
}
#endif
