// Element-wise expressions against double-precision host references: one launch for a deep tree,
// every unary function, integer and bool semantics, broadcasting and strided views on both sides,
// in-place updates, aliasing and shape errors, casts. Sizes are odd (1, 2, 31, 33, 1000003) and
// outputs are poisoned (all bytes 0xFF: NaN, invalid bool; 0x5A for integers) before each run.
// Under ThreadSanitizer only the view, piece and aliasing tests are built: the expression kernels
// (kernels/tessel/kernels/expression.cuh) share no memory between threads (no shared memory, no
// barrier, no warp collective; one thread writes each output element, which the poisoned outputs
// check), so the value tests give TSan nothing to find, and were most of this file's compile time
// there. The ones left run expressions whose operands alias or overlap the output, and several
// launches in order on a stream.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <random>
#include <span>
#include <sstream>

#include <tessel/ops/assign.hpp>
#include <tessel/ops/pieces.hpp>

#include "../reference/elementwise.hpp"
#include "../support/random_tensor.hpp"

using namespace tessel;
using reference::at;
using reference::for_each_index;

namespace {

template <class T>
using Operand = testing::TensorPair<T>;

template <class T>
Operand<T> random_operand(const Shape& s, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
    return testing::random_pair<T>(s, seed, lo, hi);
}

template <class T>
Tensor<T> poisoned(const Shape& s) {
    Tensor<T> t = empty<T>(s);
    // Integers take 0x5A bytes (0x5A5A5A5A as int32): 0xFF would be -1, a common small result.
    const int byte = std::is_integral_v<T> && !std::is_same_v<T, bool> ? 0x5A : 0xFF;
    rt::memset_async(t.data(), byte, std::size_t(t.numel()) * sizeof(T), current_stream(t.device()).handle());
    return t;
}

template <class T>
double as_double(T v) {
    return convert<double>(v);
}

// Compares every element of `got` (contiguous or not) with ref(index) within atol + rtol * |ref|;
// an unwritten (NaN) element always fails.
template <class T, class Ref>
void check(const Tensor<T>& got, Ref&& ref, double atol, double rtol, const std::string& what) {
    const Tensor<T> h = got.to_host();
    std::size_t bad = 0, count = 0;
    std::ostringstream os;
    for_each_index(h.shape(), [&](const std::vector<std::int64_t>& idx) {
        const double want = ref(idx), have = as_double(at(h, idx));
        const bool ok = (std::isnan(want) && std::isnan(have)) ||
                        (!std::isnan(have) && std::fabs(have - want) <= atol + rtol * std::fabs(want)) || have == want;
        if (!ok && bad++ < 6) {
            os << "\n  at [";
            for (auto i : idx) os << i << ' ';
            os << "] expected " << want << ", got " << have;
        }
        ++count;
    });
    INFO(what << ": " << bad << " of " << count << " elements wrong" << os.str());
    CHECK(bad == 0);
}

// Bool results compared byte-exactly (an unwritten element is 0xFF, neither true nor false).
template <class Ref>
void check_bool(const Tensor<bool>& got, Ref&& ref, const std::string& what) {
    const auto bytes = reference::bytes_of(got);
    std::size_t i = 0, bad = 0;
    for_each_index(got.shape(), [&](const std::vector<std::int64_t>& idx) {
        bad += bytes[i++] != (ref(idx) ? 1 : 0);
    });
    INFO(what << ": " << bad << " of " << bytes.size() << " elements wrong");
    CHECK(bad == 0);
}

}  // namespace

#ifndef TESSEL_TEST_UNDER_TSAN  // value tests: not built under ThreadSanitizer (see the top)
// ---- types ----------------------------------------------------------------------------------------

static_assert(std::is_same_v<ops::promote_t<__nv_bfloat16, float>, float>);
static_assert(std::is_same_v<ops::promote_t<__half, __nv_bfloat16>, float>);
static_assert(std::is_same_v<ops::promote_t<__half, __half>, __half>);
static_assert(std::is_same_v<ops::promote_t<float, double>, double>);
static_assert(std::is_same_v<ops::promote_t<std::int32_t, float>, float>);
static_assert(std::is_same_v<ops::promote_t<std::int8_t, std::uint8_t>, std::int32_t>);
static_assert(std::is_same_v<ops::promote_t<std::int32_t, std::int64_t>, std::int64_t>);
static_assert(std::is_same_v<ops::promote_t<bool, std::int8_t>, std::int8_t>);
static_assert(std::is_same_v<ops::promote_t<__half, ops::weak_float>, __half>);
static_assert(std::is_same_v<ops::promote_t<std::int32_t, ops::weak_float>, float>);
static_assert(std::is_same_v<ops::promote_t<std::int8_t, ops::weak_int>, std::int8_t>);
static_assert(std::is_same_v<ops::promote_t<bool, ops::weak_int>, std::int64_t>);
static_assert(std::is_same_v<ops::compute_t<__nv_bfloat16>, float>);

TEST_CASE("expression result types follow the documented promotion", "[ops][expression]") {
    auto b = empty<__nv_bfloat16>({3});
    auto f = empty<float>({3});
    auto i = empty<std::int32_t>({3});
    auto h = empty<__half>({3});
    STATIC_REQUIRE(std::is_same_v<decltype(b + f)::dtype, float>);
    STATIC_REQUIRE(std::is_same_v<decltype(b * 2.0)::dtype, __nv_bfloat16>);
    STATIC_REQUIRE(std::is_same_v<decltype(h + b)::dtype, float>);
    STATIC_REQUIRE(std::is_same_v<decltype(i / 2)::dtype, float>);  // true division
    STATIC_REQUIRE(std::is_same_v<decltype(i * 2)::dtype, std::int32_t>);
    STATIC_REQUIRE(std::is_same_v<decltype(i * 2.5)::dtype, float>);
    STATIC_REQUIRE(std::is_same_v<decltype(exp(i))::dtype, float>);
    STATIC_REQUIRE(std::is_same_v<decltype(f < i)::dtype, bool>);
    STATIC_REQUIRE(std::is_same_v<decltype(where(f > 0, b, h))::dtype, float>);
    // Two numbers: torch's default types, as torch.where(mask, 1.0, 0) is float32.
    STATIC_REQUIRE(std::is_same_v<decltype(where(f > 0, 1.0, 0))::dtype, float>);
    STATIC_REQUIRE(std::is_same_v<decltype(where(f > 0, 1, 'a'))::dtype, std::int64_t>);
    STATIC_REQUIRE(std::is_same_v<decltype(where(f > 0, true, false))::dtype, bool>);
    STATIC_REQUIRE(std::is_same_v<decltype(where(f > 0, 1.0, 0) * b)::dtype, float>);  // float32 tensor times bf16
    STATIC_REQUIRE(std::is_same_v<decltype(cast_to<__half>(f))::dtype, __half>);
    CHECK(evaluate(b + f).dtype() == DType::f32);
}

// ---- one launch, deep trees -----------------------------------------------------------------------

TEMPLATE_TEST_CASE("a depth-7 expression is one kernel and matches the double reference", "[ops][expression]", float,
                   double, __nv_bfloat16, __half) {
    using T = TestType;
    // float: ~10 roundings of values below 10 -> 2e-5 absolute; bf16 output rounds to 8 bits: 2^-8
    // relative, plus its inputs' own rounding carried through; float16 (11 bits, values far below
    // its 65504 limit) within the same bound; double: 1e-12.
    const double atol = std::is_same_v<T, double> ? 1e-12 : std::is_same_v<T, float> ? 2e-5 : 2e-2;
    const double rtol = std::is_same_v<T, double> ? 1e-12 : std::is_same_v<T, float> ? 1e-5 : 8e-3;
    for (std::int64_t n : {std::int64_t(1), std::int64_t(2), std::int64_t(31), std::int64_t(33), testing::large(1000003)}) {
        INFO("n " << n);
        auto a = random_operand<T>({n}, 1), b = random_operand<T>({n}, 2), c = random_operand<T>({n}, 3, -4, 4);
        auto out = poisoned<T>({n});
        const auto before = testing::launch_count();
        (out = relu(a.dev * b.dev + c.dev) / (1 + exp(-a.dev)) - sqrt(abs(c.dev)) * 0.5 + where(a.dev > b.dev, a.dev, b.dev)).run();
        if (backend == Backend::sim) CHECK(testing::launch_count() - before == 1);
        check(out,
              [&](const auto& i) {
                  const double x = as_double(at(a.host, i)), y = as_double(at(b.host, i)), z = as_double(at(c.host, i));
                  return std::max(x * y + z, 0.0) / (1 + std::exp(-x)) - std::sqrt(std::fabs(z)) * 0.5 + (x > y ? x : y);
              },
              atol, rtol, "deep expression");
    }
}

// ---- every unary function -------------------------------------------------------------------------

namespace {
template <class T, class Make>
void check_unary(const char* name, Make make, double (*ref)(double), double lo, double hi) {
    // float: CUDA's single-precision functions are within 2-4 ulp (1 ulp ~ 6e-8 relative); 8e-7
    // relative plus 1e-6 absolute leaves margin for the composite ones (gelu, softplus, silu).
    // double: the double functions are within 1-2 ulp.
    const double atol = std::is_same_v<T, float> ? 1e-6 : 1e-14, rtol = std::is_same_v<T, float> ? 8e-7 : 1e-14;
    for (std::int64_t n : {1, 33, 4099}) {
        auto x = random_operand<T>({n}, std::uint64_t(n) * 7 + 1, lo, hi);
        auto out = poisoned<T>({n});
        (out = make(x.dev)).run();
        check(out, [&](const auto& i) { return ref(as_double(at(x.host, i))); }, atol, rtol, name);
    }
}
double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x))); }
double softplus_ref(double x) { return std::log1p(std::exp(x)); }
}  // namespace

TEMPLATE_TEST_CASE("every unary function matches its double reference", "[ops][expression]", float, double) {
    using T = TestType;
    using E = Tensor<T>;
    check_unary<T>("sqrt", [](const E& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 100);
    check_unary<T>("rsqrt", [](const E& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.01, 100);
    check_unary<T>("exp", [](const E& x) { return exp(x); }, [](double x) { return std::exp(x); }, -10, 10);
    check_unary<T>("exp2", [](const E& x) { return exp2(x); }, [](double x) { return std::exp2(x); }, -10, 10);
    check_unary<T>("log", [](const E& x) { return log(x); }, [](double x) { return std::log(x); }, 0.01, 100);
    check_unary<T>("log2", [](const E& x) { return log2(x); }, [](double x) { return std::log2(x); }, 0.01, 100);
    check_unary<T>("log1p", [](const E& x) { return log1p(x); }, [](double x) { return std::log1p(x); }, -0.5, 10);
    check_unary<T>("expm1", [](const E& x) { return expm1(x); }, [](double x) { return std::expm1(x); }, -1, 1);
    check_unary<T>("sin", [](const E& x) { return sin(x); }, [](double x) { return std::sin(x); }, -6, 6);
    check_unary<T>("cos", [](const E& x) { return cos(x); }, [](double x) { return std::cos(x); }, -6, 6);
    check_unary<T>("tanh", [](const E& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -5, 5);
    check_unary<T>("sigmoid", [](const E& x) { return sigmoid(x); }, sigmoid_ref, -10, 10);
    check_unary<T>("silu", [](const E& x) { return silu(x); }, [](double x) { return x * sigmoid_ref(x); }, -10, 10);
    check_unary<T>("gelu", [](const E& x) { return gelu(x); }, gelu_ref, -5, 5);
    check_unary<T>("gelu_tanh", [](const E& x) { return gelu_tanh(x); }, gelu_tanh_ref, -5, 5);
    check_unary<T>("softplus", [](const E& x) { return softplus(x); }, softplus_ref, -30, 30);
    check_unary<T>("relu", [](const E& x) { return relu(x); }, [](double x) { return std::max(x, 0.0); }, -1, 1);
    check_unary<T>("leaky_relu", [](const E& x) { return leaky_relu(x, 0.2); }, [](double x) { return x < 0 ? 0.2 * x : x; }, -1, 1);
    check_unary<T>("abs", [](const E& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -1, 1);
    check_unary<T>("negate", [](const E& x) { return -x; }, [](double x) { return -x; }, -1, 1);
    check_unary<T>("floor", [](const E& x) { return floor(x * 10); }, [](double x) { return std::floor(x * 10); }, -1, 1);
    check_unary<T>("ceil", [](const E& x) { return ceil(x * 10); }, [](double x) { return std::ceil(x * 10); }, -1, 1);
    check_unary<T>("round", [](const E& x) { return round(floor(x * 10) + 0.5); },
                   [](double x) { return std::nearbyint(std::floor(x * 10) + 0.5); }, -3, 3);  // halves: to even
    check_unary<T>("pow", [](const E& x) { return pow(x, 1.5); }, [](double x) { return std::pow(x, 1.5); }, 0, 10);
    check_unary<T>("clamp", [](const E& x) { return clamp(x, -0.25, 0.5); }, [](double x) { return std::clamp(x, -0.25, 0.5); }, -1, 1);
    check_unary<T>("mod", [](const E& x) { return x % 0.75; }, [](double x) { return x - 0.75 * std::floor(x / 0.75); }, -3, 3);
}

TEST_CASE("isnan, isinf and NaN-propagating maximum", "[ops][expression]") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    auto x = from_host<float>({1.f, nan, inf, -inf, 0.f, -2.f, nan}, {7});
    auto y = from_host<float>({2.f, 1.f, 1.f, 1.f, nan, -3.f, 0.f}, {7});
    auto isn = poisoned<bool>({7}), isi = poisoned<bool>({7});
    (isn = isnan(x)).run();
    (isi = isinf(x)).run();
    check_bool(isn, [](const auto& i) { return i[0] == 1 || i[0] == 6; }, "isnan");
    check_bool(isi, [](const auto& i) { return i[0] == 2 || i[0] == 3; }, "isinf");
    auto m = poisoned<float>({7});
    (m = maximum(x, y)).run();
    const auto v = m.to_vector();
    CHECK(v[0] == 2.f);
    CHECK(std::isnan(v[1]));
    CHECK(v[2] == inf);
    CHECK(v[3] == 1.f);
    CHECK(std::isnan(v[4]));
    CHECK(v[5] == -2.f);
    CHECK(std::isnan(v[6]));
}

// ---- integers and bools ---------------------------------------------------------------------------

TEST_CASE("integer arithmetic: Python modulo, true division, powers, comparisons", "[ops][expression]") {
    const std::int64_t n = 1031;
    auto a = random_operand<std::int32_t>({n}, 11, -1000, 1000), b = random_operand<std::int32_t>({n}, 12, -9, 9);
    auto sum = poisoned<std::int32_t>({n}), mod = poisoned<std::int32_t>({n}), pw = poisoned<std::int32_t>({n});
    auto div = poisoned<float>({n});
    auto lt = poisoned<bool>({n});
    (sum = a.dev * 3 - b.dev + maximum(a.dev, b.dev) - abs(a.dev)).run();
    (mod = a.dev % b.dev).run();
    (div = a.dev / b.dev).run();
    (pw = pow(b.dev, 3)).run();
    (lt = (a.dev < b.dev * 100) && !(a.dev == 0)).run();
    auto ai = [&](const auto& i) { return double(at(a.host, i)); };
    auto bi = [&](const auto& i) { return double(at(b.host, i)); };
    check(sum, [&](const auto& i) { return ai(i) * 3 - bi(i) + std::max(ai(i), bi(i)) - std::fabs(ai(i)); }, 0, 0, "int arithmetic");
    check(mod,
          [&](const auto& i) { return bi(i) == 0 ? 0.0 : ai(i) - bi(i) * std::floor(ai(i) / bi(i)); }, 0, 0,
          "int modulo (sign of the divisor; x % 0 = 0)");
    check(div, [&](const auto& i) { return ai(i) / bi(i); }, 0, 1e-7, "int true division");  // x/0 is +-inf or NaN
    check(pw, [&](const auto& i) { return bi(i) * bi(i) * bi(i); }, 0, 0, "int pow");
    check_bool(lt, [&](const auto& i) { return ai(i) < bi(i) * 100 && ai(i) != 0; }, "comparison and logic");

    auto c = random_operand<std::int8_t>({n}, 13, -100, 100);
    auto d = random_operand<std::uint8_t>({n}, 14, 0, 250);
    auto wide = poisoned<std::int32_t>({n});
    STATIC_REQUIRE(std::is_same_v<decltype(c.dev * d.dev)::dtype, std::int32_t>);
    (wide = c.dev * d.dev).run();  // int8 * uint8 computes in int32: no wrap-around
    check(wide, [&](const auto& i) { return double(at(c.host, i)) * double(at(d.host, i)); }, 0, 0, "int8 * uint8");
}

TEST_CASE("clamp and where with numbers outside an integer operand's range", "[ops][expression]") {
    // A bound beyond the type clamps as its nearest value in range (converted, -1000 would wrap to 24
    // in int8, -5 to 251 in uint8); a bound with no such value, or a where value the result cannot
    // hold, is refused as torch refuses it.
    const std::int64_t n = 1031;
    auto c = random_operand<std::int8_t>({n}, 31, -128, 127);
    auto u = random_operand<std::uint8_t>({n}, 32, 0, 255);
    auto w = random_operand<std::int32_t>({n}, 33, -2000000000, 2000000000);
    auto c_out = poisoned<std::int8_t>({n});
    auto u_out = poisoned<std::uint8_t>({n});
    auto w_out = poisoned<std::int32_t>({n});
    auto exact = [](double x, double lo, double hi) { return std::min(std::max(x, lo), hi); };
    (c_out = clamp(c.dev, -1000, 1000)).run();
    check(c_out, [&](const auto& i) { return exact(at(c.host, i), -1000, 1000); }, 0, 0, "int8 clamp(-1000, 1000)");
    (c_out = clamp(c.dev, -5, 300)).run();
    check(c_out, [&](const auto& i) { return exact(at(c.host, i), -5, 300); }, 0, 0, "int8 clamp(-5, 300)");
    (u_out = clamp(u.dev, -5, 10)).run();
    check(u_out, [&](const auto& i) { return exact(at(u.host, i), -5, 10); }, 0, 0, "uint8 clamp(-5, 10)");
    (w_out = clamp(w.dev, 0, 3000000000LL)).run();
    check(w_out, [&](const auto& i) { return exact(at(w.host, i), 0, 3e9); }, 0, 0, "int32 clamp(0, 3e9)");
    (c_out = clamp(c.dev, 7, 7)).run();
    check(c_out, [&](const auto&) { return 7.0; }, 0, 0, "int8 clamp(7, 7)");
    CHECK_THROWS_WITH((c_out = clamp(c.dev, 200, 300)).run(), Catch::Contains("lower bound 200 is above every value of int8"));
    CHECK_THROWS_WITH((u_out = clamp(u.dev, -9, -1)).run(), Catch::Contains("upper bound -1 is below every value of uint8"));
    // maximum and minimum with a number beyond the type bound exactly as clamp does (converted, -1
    // would be uint8 255 and maximum(u8, -1) 255 everywhere), and refuse a number no value can meet.
    // (A fresh poisoned output each: the expected values repeat from one line to the next.)
    const auto bounded = [&](auto out, const auto& expr, auto ref, const char* what) {
        (out = expr).run();
        check(out, ref, 0, 0, what);
    };
    bounded(poisoned<std::uint8_t>({n}), maximum(u.dev, -1), [&](const auto& i) { return double(at(u.host, i)); }, "maximum(uint8, -1)");
    bounded(poisoned<std::uint8_t>({n}), maximum(-300, u.dev), [&](const auto& i) { return double(at(u.host, i)); }, "maximum(-300, uint8)");
    bounded(poisoned<std::int8_t>({n}), minimum(c.dev, 1000), [&](const auto& i) { return double(at(c.host, i)); }, "minimum(int8, 1000)");
    bounded(poisoned<std::int8_t>({n}), minimum(c.dev, -5), [&](const auto& i) { return std::min(double(at(c.host, i)), -5.0); }, "minimum(int8, -5)");
    bounded(poisoned<std::uint8_t>({n}), minimum(u.dev, 'a'), [&](const auto& i) { return std::min(double(at(u.host, i)), 97.0); }, "minimum(uint8, 'a')");
    auto l = random_operand<std::int64_t>({n}, 36, -1e18, 1e18);
    bounded(poisoned<std::int64_t>({n}), minimum(l.dev, ~0ull), [&](const auto& i) { return double(at(l.host, i)); }, "minimum(int64, 2^64 - 1)");
    CHECK_THROWS_WITH(evaluate(maximum(l.dev, ~0ull)), Catch::Contains("maximum: the number 18446744073709551615 is above every value of int64"));
    auto bits = random_operand<bool>({n}, 37);
    STATIC_REQUIRE(std::is_same_v<decltype(maximum(bits.dev, -1))::dtype, std::int64_t>);  // bool with an integer number: int64
    bounded(poisoned<std::int64_t>({n}), maximum(bits.dev, -1), [&](const auto& i) { return at(bits.host, i) ? 1.0 : 0.0; }, "maximum(bool, -1)");
    CHECK_THROWS_WITH((u_out = maximum(u.dev, 300)).run(), Catch::Contains("maximum: the number 300 is above every value of uint8 [0, 255]"));
    CHECK_THROWS_WITH((c_out = minimum(c.dev, -1000)).run(), Catch::Contains("minimum: the number -1000 is below every value of int8 [-128, 127]"));

    auto p = random_operand<bool>({n}, 34);
    (c_out = where(p.dev, c.dev, -128)).run();
    check(c_out, [&](const auto& i) { return at(p.host, i) ? double(at(c.host, i)) : -128.0; }, 0, 0, "where(int8, -128)");
    CHECK_THROWS_WITH((c_out = where(p.dev, c.dev, 300)).run(), Catch::Contains("value 300 does not fit the result's type int8"));
    CHECK_THROWS_WITH((u_out = where(p.dev, -1, u.dev)).run(), Catch::Contains("value -1 does not fit the result's type uint8"));
    auto f_out = poisoned<float>({n});
    (f_out = where(p.dev, c.dev, 300.5)).run();  // a floating number makes the result float: nothing to refuse
    check(f_out, [&](const auto& i) { return at(p.host, i) ? double(at(c.host, i)) : 300.5; }, 0, 0, "where(int8, 300.5)");
    // Two numbers: float32 for a floating one (0.1 rounded to float32, as torch's float32 result),
    // int64 for two integers; such an expression can be evaluated alone.
    (f_out = where(p.dev, 0.1, -7)).run();
    check(f_out, [&](const auto& i) { return at(p.host, i) ? double(0.1f) : -7.0; }, 0, 0, "where(mask, 0.1, -7)");
    CHECK(evaluate(where(p.dev, 0.1, -7)).dtype() == DType::f32);
    auto l_out = poisoned<std::int64_t>({n});
    (l_out = where(!p.dev, std::int64_t(1) << 40, 'x')).run();
    check(l_out, [&](const auto& i) { return at(p.host, i) ? 120.0 : 1099511627776.0; }, 0, 0, "where(mask, 2^40, 'x')");
    CHECK_THROWS_WITH(evaluate(where(p.dev, 0, ~0ull)), Catch::Contains("value 18446744073709551615 does not fit int64"));

    // A floating or wider bound widens the clamp, which then runs in that type (torch's result types).
    STATIC_REQUIRE(std::is_same_v<decltype(clamp(u.dev, -5.5, -1))::dtype, float>);
    (f_out = clamp(u.dev, -5.5, -1)).run();
    check(f_out, [&](const auto&) { return -1.0; }, 0, 0, "uint8 clamp(-5.5, -1)");
    (f_out = clamp(u.dev, 300, 400.5)).run();
    check(f_out, [&](const auto&) { return 300.0; }, 0, 0, "uint8 clamp(300, 400.5)");
    STATIC_REQUIRE(std::is_same_v<decltype(clamp(c.dev, 1000, w.dev))::dtype, std::int32_t>);
    (w_out = clamp(c.dev, 1000, w.dev)).run();
    check(w_out, [&](const auto& i) { return std::min(1000.0, double(at(w.host, i))); }, 0, 0, "int8 clamp(1000, int32 tensor)");
    // Character numbers are integers like any other.
    (u_out = clamp(u.dev, 'a', 'z')).run();
    check(u_out, [&](const auto& i) { return exact(at(u.host, i), 'a', 'z'); }, 0, 0, "uint8 clamp('a', 'z')");
    (u_out = where(p.dev, u.dev, ' ')).run();
    check(u_out, [&](const auto& i) { return at(p.host, i) ? double(at(u.host, i)) : 32.0; }, 0, 0, "where(uint8, ' ')");

    // Comparisons with an integer number are exact: u8 > -1 everywhere, i32 < 2^40 everywhere.
    auto mask = poisoned<bool>({n});
    (mask = u.dev > -1).run();
    check_bool(mask, [&](const auto&) { return true; }, "uint8 > -1");
    (mask = w.dev < (std::int64_t(1) << 40)).run();
    check_bool(mask, [&](const auto&) { return true; }, "int32 < 2^40");
    (mask = c.dev == 300 || c.dev == 44).run();  // 300 is no int8 (converted it would be 44)
    check_bool(mask, [&](const auto& i) { return at(c.host, i) == 44; }, "int8 == 300 || int8 == 44");
    // Against a bool operand too (2^64 - 1 was converted to int64 -1, and flags < it false everywhere).
    const auto flags = random_operand<bool>({n}, 38);
    auto lt = poisoned<bool>({n});
    (lt = flags.dev < 5u).run();
    check_bool(lt, [&](const auto&) { return true; }, "bool < 5u");
    CHECK_THROWS_WITH((lt = flags.dev < ~0ull).run(), Catch::Contains("the number 18446744073709551615 is beyond int64"));
}

TEMPLATE_TEST_CASE("comparing a reduced-precision tensor with a number rounds the number to its type", "[ops][expression]", __nv_bfloat16,
                   __half, __nv_fp8_e4m3, __nv_fp8_e5m2) {
    // torch's rule: the comparison is made in the common type, so x == 0.1 holds where x holds the
    // type's 0.1 -- for a number within the type's finite range; one beyond it is compared as it is
    // (rounded, 1000 would be e4m3's 448 and x < 1000 false for x = 448). Values: neighbours of
    // each threshold in T, the infinities as T holds them, plus random ones.
    using T = TestType;
    const double inf = std::numeric_limits<double>::infinity();
    const double largest = std::is_same_v<T, __nv_bfloat16> ? 0x1.fep127 : std::is_same_v<T, __half> ? 65504.0
                           : std::is_same_v<T, __nv_fp8_e4m3> ? 448.0 : 57344.0;
    const double thresholds[] = {0.1, 1.001, -2.7182818, 1e-3, 300.3, 1000.0, 70000.0, -70000.0, inf, -inf};
    const auto in_t = [&](double t) { return std::fabs(t) <= largest ? testing::to_double(testing::from_double<T>(t)) : t; };
    std::vector<double> values;
    for (double t : thresholds) {
        const T r = testing::from_double<T>(std::clamp(t, -largest, largest));
        values.push_back(testing::to_double(r));
        values.push_back(std::nextafter(testing::to_double(r), 1e9));  // not in T: rounds to r or its upper neighbour
        values.push_back(t);
        values.push_back(-t);
    }
    std::mt19937_64 rng(35);
    for (int i = 0; i < 101; ++i) values.push_back(std::uniform_real_distribution<double>(-4, 4)(rng));
    std::vector<T> host(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) host[i] = testing::from_double<T>(values[i]);
    const auto x = from_host<T>(std::span<const T>(host), Shape{std::int64_t(host.size())});
    for (double t : thresholds) {
        const double rt = in_t(t);
        INFO("threshold " << t << " (" << rt << " in T)");
        auto eq = poisoned<bool>({std::int64_t(host.size())}), lt = poisoned<bool>({std::int64_t(host.size())});
        auto ge = poisoned<bool>({std::int64_t(host.size())});
        (eq = x == t).run();
        (lt = x < t).run();
        (ge = t >= x).run();
        auto xi = [&](const auto& i) { return testing::to_double(host[std::size_t(i[0])]); };
        check_bool(eq, [&](const auto& i) { return xi(i) == rt; }, "x == t");
        check_bool(lt, [&](const auto& i) { return xi(i) < rt; }, "x < t");
        check_bool(ge, [&](const auto& i) { return rt >= xi(i); }, "t >= x");
    }
}

TEMPLATE_TEST_CASE("an integer tensor meets a reduced-precision one converted to it first", "[ops][expression]", __nv_bfloat16,
                   __half) {
    // torch converts every input to the common dtype: int32 257 with a bf16 tensor is 256, so
    // 257 - bf16(256) is 0 and 257 == bf16(256). Integers beyond the type's exact range (256 for
    // bf16, 2048 for half), the other operand the integer rounded, +-1 or +-3 before rounding.
    using T = TestType;
    const int span = std::is_same_v<T, __half> ? 60000 : 1 << 20;
    const std::int64_t n = 1031;
    std::mt19937_64 rng(53);
    std::vector<int> ai(static_cast<std::size_t>(n));
    std::vector<T> bt(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < ai.size(); ++i) {
        ai[i] = std::uniform_int_distribution<int>(-span, span)(rng);
        bt[i] = testing::from_double<T>(double(ai[i]) + double(int(i % 5) * 2 - 4) * (i % 3 == 0 ? 0 : 1));
    }
    const auto a = from_host<int>(std::span<const int>(ai), Shape{n});
    const auto b = from_host<T>(std::span<const T>(bt), Shape{n});
    const auto a_in_t = [&](const auto& i) { return testing::to_double(testing::from_double<T>(double(ai[std::size_t(i[0])]))); };
    const auto bd = [&](const auto& i) { return testing::to_double(bt[std::size_t(i[0])]); };
    const auto in_t = [](double v) { return testing::to_double(testing::from_double<T>(v)); };
    auto diff = poisoned<T>({n}), picked = poisoned<T>({n});
    auto eq = poisoned<bool>({n}), lt = poisoned<bool>({n});
    (diff = a - b).run();
    (eq = a == b).run();
    (lt = a < b).run();
    (picked = where(a > 0, a, b) - b).run();  // where's branches are converted too
    check(diff, [&](const auto& i) { return in_t(a_in_t(i) - bd(i)); }, 0, 0, "int - T");
    check_bool(eq, [&](const auto& i) { return a_in_t(i) == bd(i); }, "int == T");
    check_bool(lt, [&](const auto& i) { return a_in_t(i) < bd(i); }, "int < T");
    check(picked, [&](const auto& i) { return in_t((ai[std::size_t(i[0])] > 0 ? a_in_t(i) : bd(i)) - bd(i)); }, 0, 0,
          "where(int > 0, int, T) - T");
    std::size_t exact_equal = 0;  // the case is exercised: equal after rounding, unequal as integers
    for (std::size_t i = 0; i < ai.size(); ++i)
        exact_equal += a_in_t(std::vector<std::int64_t>{std::int64_t(i)}) == testing::to_double(bt[i]) &&
                       double(ai[i]) != testing::to_double(bt[i]);
    CHECK(exact_equal > 50);
}
#endif  // TESSEL_TEST_UNDER_TSAN

TEST_CASE("a tensor assigned to a view is copied into it when run", "[ops][expression]") {
    // libtorch's `x[1] = y` copies; rebinding a temporary would do nothing. Here the assignment is
    // prepared as an expression's is and runs on the stream .run names; a named tensor still rebinds.
    static_assert(std::is_same_v<decltype(std::declval<Tensor<float>>() = std::declval<const Tensor<int>&>()),
                                 ops::Assignment<float, ops::TensorRef<int>>>);
    static_assert(std::is_same_v<decltype(std::declval<Tensor<float>&>() = std::declval<const Tensor<float>&>()), Tensor<float>&>);
    const std::int64_t rows = 5, cols = 37;
    auto x = random_operand<float>({rows, cols}, 54);
    const auto y = random_operand<float>({cols}, 55);
    const auto c = random_operand<int>({rows}, 56, -1000, 1000);
    (x.dev.select(0, 3) = y.dev).run();
    (x.dev.select(1, 4) = c.dev).run(current_stream());  // a strided column, converted from int
    check(x.dev, [&](const auto& i) {
        if (i[1] == 4) return double(at(c.host, std::vector<std::int64_t>{i[0]}));
        if (i[0] == 3) return double(at(y.host, std::vector<std::int64_t>{i[1]}));
        return double(at(x.host, i));
    }, 0, 0, "view = tensor");
    Tensor<float> named = x.dev.select(0, 0);
    named = y.dev;  // rebinds
    CHECK(named.data() == y.dev.data());
    CHECK_THROWS_WITH((x.dev.slice(1, 1, cols) = x.dev.slice(1, 0, cols - 1)).run(), Catch::Contains("overlaps the output"));
}

#ifndef TESSEL_TEST_UNDER_TSAN  // value tests: not built under ThreadSanitizer (see the top)
TEST_CASE("bool tensors: logic and where", "[ops][expression]") {
    const std::int64_t n = 257;
    auto p = random_operand<bool>({n}, 21), q = random_operand<bool>({n}, 22);
    auto x = random_operand<float>({n}, 23);
    auto out = poisoned<bool>({n});
    auto sel = poisoned<float>({n});
    (out = logical_or(p.dev && !q.dev, logical_not(p.dev) && q.dev)).run();  // exclusive or
    (sel = where(p.dev, x.dev, -x.dev * 2)).run();
    check_bool(out, [&](const auto& i) { return at(p.host, i) != at(q.host, i); }, "xor");
    check(sel, [&](const auto& i) { return at(p.host, i) ? double(at(x.host, i)) : -2.0 * double(at(x.host, i)); }, 0, 0, "where");
}

// ---- shapes and layouts ---------------------------------------------------------------------------

TEST_CASE("broadcasting, strided and permuted operands, strided outputs", "[ops][expression]") {
    auto a = random_operand<float>({5, 1, 7}, 31), b = random_operand<float>({3, 1}, 32);
    auto out = poisoned<float>({5, 3, 7});
    (out = a.dev * b.dev + 1).run();
    check(out, [&](const auto& i) { return double(at(a.host, i)) * double(at(b.host, i)) + 1; }, 1e-6, 1e-6, "broadcast");

    // A permuted 3-d view plus a sliced (step 2) view, into a transposed output.
    auto big = random_operand<float>({9, 33, 31}, 33);
    auto p = Operand<float>{big.dev.permute({2, 0, 1}), big.host.permute({2, 0, 1})};                     // [31, 9, 33]
    auto s = random_operand<float>({31, 9, 66}, 34);
    auto sv = Operand<float>{s.dev.slice(2, 0, 66, 2), s.host.slice(2, 0, 66, 2)};                        // [31, 9, 33]
    auto target = poisoned<float>({33, 9, 31});
    auto tv = target.permute({2, 1, 0});                                                                  // [31, 9, 33]
    (tv = p.dev - sv.dev * 2).run();
    check(tv, [&](const auto& i) { return double(at(p.host, i)) - 2.0 * double(at(sv.host, i)); }, 1e-6, 1e-6, "strided");

    // Writing into every other element leaves the others as they were.
    auto half_out = poisoned<float>({4001});
    auto every_other = half_out.slice(0, 0, 4001, 2);
    auto x = random_operand<float>({2001}, 35);
    (every_other = x.dev + 0.5f).run();
    const auto all = half_out.to_vector();
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < all.size(); ++i)
        wrong += i % 2 ? !std::isnan(all[i]) : all[i] != float(double(x.host.data()[i / 2]) + 0.5);
    CHECK(wrong == 0);

    // A misaligned contiguous view (offset by one element) takes the unvectorised path.
    auto y = random_operand<float>({1001}, 36);
    auto ys = Operand<float>{y.dev.slice(0, 1, 1001), y.host.slice(0, 1, 1001)};
    auto o = poisoned<float>({1000});
    (o = ys.dev * 3).run();
    check(o, [&](const auto& i) { return 3.0 * double(at(ys.host, i)); }, 0, 1e-7, "misaligned");

    // Rank 0 and empty tensors.
    auto r0 = random_operand<double>({}, 37);
    auto o0 = poisoned<double>({});
    (o0 = r0.dev * r0.dev).run();
    CHECK(o0.item() == at(r0.host, {}) * at(r0.host, {}));
    auto e = empty<float>({0, 5});
    const auto before = testing::launch_count();
    (e = e * 2).run();
    CHECK(testing::launch_count() == before);
}

// Row and column broadcasts over rows aligned to the vector width run evaluate_rows: V columns
// per thread, the last cols % V of each row one by one (rows padded apart so that the tail is
// not a multiple of V); rows that are not aligned fall back to evaluate_strided. Tolerances: the
// result is computed in float (double for double) and rounded once to T, so within half an ulp
// of T: 2^-11 relative for half, 2^-24 for float, 2^-53 for double.
TEMPLATE_TEST_CASE("row and column broadcasts take the row kernel", "[ops][expression]", float, __half, double) {
    using T = TestType;
    const double rtol = std::is_same_v<T, __half> ? 1e-3 : std::is_same_v<T, float> ? 1e-6 : 1e-15;
    auto expect_kernel = [](const char* name) {
        if (backend == Backend::sim) CHECK_THAT(testing::last_kernel(), Catch::Contains(name));
    };
    {  // bias add, [37, 64] + [64]: whole vectors
        auto a = random_operand<T>({37, 64}, 41), bias = random_operand<T>({64}, 42);
        auto out = poisoned<T>({37, 64});
        (out = a.dev + bias.dev).run();
        expect_kernel("evaluate_rows");
        check(out, [&](const auto& i) { return as_double(at(a.host, i)) + as_double(at(bias.host, {i[1]})); }, 0, rtol, "bias add");
    }
    {  // rows of 101 inside rows of 104: each row ends in a partial vector
        auto a = random_operand<T>({37, 104}, 43), bias = random_operand<T>({101}, 44);
        auto whole = poisoned<T>({37, 104});
        auto out = whole.slice(1, 0, 101);
        auto av = Operand<T>{a.dev.slice(1, 0, 101), a.host.slice(1, 0, 101)};
        (out = av.dev * bias.dev - 1).run();
        expect_kernel("evaluate_rows");
        check(out, [&](const auto& i) { return as_double(at(av.host, i)) * as_double(at(bias.host, {i[1]})) - 1; }, 0, rtol, "padded rows");
        // The padding columns keep their poison.
        const Tensor<T> h = whole.to_host();
        std::size_t written = 0;
        for (std::int64_t r = 0; r < 37; ++r)
            for (std::int64_t c = 101; c < 104; ++c) written += !std::isnan(as_double(at(h, {r, c})));
        CHECK(written == 0);
    }
    {  // column scale, [33, 48] * [33, 1], and a mixed-type operand
        auto a = random_operand<T>({33, 48}, 45), scale = random_operand<T>({33, 1}, 46);
        auto f = random_operand<float>({48}, 47);
        auto out = poisoned<T>({33, 48});
        (out = a.dev * scale.dev).run();
        expect_kernel("evaluate_rows");
        check(out, [&](const auto& i) { return as_double(at(a.host, i)) * as_double(at(scale.host, {i[0], 0})); }, 0, rtol, "column scale");
        auto mixed = poisoned<T>({33, 48});
        (mixed = a.dev + f.dev).run();
        expect_kernel("evaluate_rows");
        check(mixed, [&](const auto& i) { return as_double(at(a.host, i)) + double(at(f.host, {i[1]})); }, 0, rtol, "mixed types");
    }
    {  // rows of 101 elements start unaligned: the strided kernel, same results
        auto a = random_operand<T>({37, 101}, 48), bias = random_operand<T>({101}, 49);
        auto out = poisoned<T>({37, 101});
        (out = a.dev + bias.dev).run();
        expect_kernel("evaluate_strided");
        check(out, [&](const auto& i) { return as_double(at(a.host, i)) + as_double(at(bias.host, {i[1]})); }, 0, rtol, "unaligned rows");
    }
}
#endif  // TESSEL_TEST_UNDER_TSAN

// ---- iterations of 2^31 elements or more: several launches of the 32-bit kernels -------------------

// The boxes of detail::for_each_piece cover every element exactly once, in row-major order, each
// within the limit, with a flat iteration cut at multiples of 16: random shapes of rank 1 to 5
// against a host array that counts how often each element was covered.
TEST_CASE("pieces cover an iteration once, in order, within the limit", "[ops][expression][pieces]") {
    std::uint64_t state = 12345;
    auto next = [&](std::int64_t lo, std::int64_t hi) {  // SplitMix64, uniform enough for sizes
        state += 0x9E3779B97F4A7C15ull;
        std::uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return lo + std::int64_t((z ^ (z >> 31)) % std::uint64_t(hi - lo + 1));
    };
    for (int trial = 0; trial < 300; ++trial) {
        const int rank = int(next(1, 5));
        Shape shape;
        for (int d = 0; d < rank; ++d) shape.push_back(next(1, rank == 1 ? 5000 : rank == 2 ? 60 : rank == 3 ? 15 : 9));
        const std::int64_t limit = next(16, 700);
        std::int64_t n = 1;
        for (auto s : shape) n *= s;
        std::vector<int> covered(std::size_t(n), 0);
        std::int64_t pieces = 0, last_first = -1;
        bool within = true, ordered = true, aligned_cuts = true;
        ops::detail::for_each_piece(shape, limit, [&](const ops::detail::Piece& p) {
            ++pieces;
            std::int64_t elements = 1;
            for (int d = 0; d < rank; ++d) elements *= p.shape[d];
            within = within && elements == p.numel && p.numel <= limit && p.numel > 0;
            const std::int64_t first = ops::detail::offset_of(p.origin, Layout::contiguous(shape).strides);
            ordered = ordered && first > last_first;
            last_first = first;
            if (rank == 1) aligned_cuts = aligned_cuts && p.origin[0] % 16 == 0;
            for_each_index(p.shape, [&](const std::vector<std::int64_t>& idx) {
                std::int64_t flat = 0;
                for (int d = 0; d < rank; ++d) flat = flat * shape[d] + p.origin[d] + idx[std::size_t(d)];
                ++covered[std::size_t(flat)];
            });
        });
        INFO("shape " << shape << ", limit " << limit << ", " << pieces << " pieces");
        CHECK(within);
        CHECK(ordered);
        CHECK(aligned_cuts);
        CHECK(std::count(covered.begin(), covered.end(), 1) == n);
        if (n <= limit) CHECK(pieces == 1);
    }
    // Rank 0 is one piece of one element; an empty dim gives none.
    int calls = 0;
    ops::detail::for_each_piece(Shape{}, 16, [&](const ops::detail::Piece& p) { calls += p.numel == 1 && p.shape.size() == 0 ? 1 : 100; });
    CHECK(calls == 1);
    ops::detail::for_each_piece(Shape{5000, 0, 7}, 16, [&](const ops::detail::Piece&) { ++calls; });
    CHECK(calls == 1);
    CHECK_THROWS_WITH(ops::detail::PieceLimitForTesting(15), Catch::Contains("[16, 2^31 - 16]"));
}

// With the piece limit lowered to 1000 elements, each kernel runs a tensor as several launches with
// moved pointers; the results must equal the single-launch ones element for element (same kernel,
// same per-element arithmetic), and no element outside the pieces is written. Tolerance: one
// rounding of a float computation (2^-24 relative) unless said otherwise.
TEST_CASE("an iteration over the piece limit runs as several launches of the same kernels", "[ops][expression][pieces]") {
    const ops::detail::PieceLimitForTesting limit(1000);
    auto expect = [](const char* kernel, std::uint64_t launches, std::uint64_t before) {
        if (backend != Backend::sim) return;
        CHECK_THAT(testing::last_kernel(), Catch::Contains(kernel));
        CHECK(testing::launch_count() - before == launches);
    };
    {  // flat and aligned: pieces of 992 (1000 rounded down to 16), the vector kernel
        auto x = random_operand<float>({4099}, 51), y = random_operand<float>({4099}, 52);
        auto out = poisoned<float>({4099});
        const auto before = testing::launch_count();
        (out = x.dev * 2 + y.dev).run();
        expect("evaluate_contiguous<4", (4099 + 991) / 992, before);
        check(out, [&](const auto& i) { return 2.0 * double(at(x.host, i)) + double(at(y.host, i)); }, 0, 1e-7, "flat");
    }
    {  // flat, a float and a __half operand (pointers moved by 4 and 2 bytes per element)
        auto x = random_operand<float>({4099}, 59);
        auto h = random_operand<__half>({4099}, 60);
        auto out = poisoned<float>({4099});
        const auto before = testing::launch_count();
        (out = x.dev * h.dev).run();
        expect("evaluate_contiguous<4", (4099 + 991) / 992, before);
        check(out, [&](const auto& i) { return double(at(x.host, i)) * as_double(at(h.host, i)); }, 0, 1e-7, "flat, mixed element sizes");
    }
    {  // flat __half (8 to a vector) from an operand offset by one element: the scalar kernel
        auto x = random_operand<__half>({3001}, 53);
        auto xs = Operand<__half>{x.dev.slice(0, 1, 3001), x.host.slice(0, 1, 3001)};
        auto out = poisoned<__half>({3000});
        const auto before = testing::launch_count();
        (out = xs.dev - 1).run();
        expect("evaluate_contiguous<1,", (3000 + 991) / 992, before);
        check(out, [&](const auto& i) { return as_double(at(xs.host, i)) - 1; }, 0, 1e-3, "flat misaligned");
    }
    {  // a bias add over rows of 129 padded to 132: 7 rows (903 elements) a piece
        auto a = random_operand<float>({37, 132}, 54), bias = random_operand<float>({129}, 55);
        auto av = Operand<float>{a.dev.slice(1, 0, 129), a.host.slice(1, 0, 129)};
        auto whole = poisoned<float>({37, 132});
        auto out = whole.slice(1, 0, 129);
        const auto before = testing::launch_count();
        (out = av.dev + bias.dev).run();
        expect("evaluate_rows", (37 + 6) / 7, before);
        check(out, [&](const auto& i) { return double(at(av.host, i)) + double(at(bias.host, {i[1]})); }, 0, 1e-7, "rows");
        const Tensor<float> h = whole.to_host();
        std::size_t written = 0;
        for (std::int64_t r = 0; r < 37; ++r)
            for (std::int64_t c = 129; c < 132; ++c) written += !std::isnan(at(h, {r, c}));
        CHECK(written == 0);
    }
    {  // strided [31, 9, 33]: 3 of the outer dim's 297-element blocks a piece
        auto big = random_operand<float>({9, 33, 31}, 56);
        auto p = Operand<float>{big.dev.permute({2, 0, 1}), big.host.permute({2, 0, 1})};
        auto target = poisoned<float>({33, 9, 31});
        auto tv = target.permute({2, 1, 0});
        const auto before = testing::launch_count();
        (tv = p.dev * 3 + 1).run();
        expect("evaluate_strided", (31 + 2) / 3, before);
        // 3x + 1 rounds twice in float, each time by at most half an ulp of a value below 4: 2^-22.
        check(tv, [&](const auto& i) { return 3.0 * double(at(p.host, i)) + 1; }, 2.4e-7, 0, "strided, outer dim cut");
    }
    {  // strided [3, 5, 401]: the middle dim cut in runs of 2 (802 elements), under each outer index
        auto src = random_operand<float>({401, 5, 3}, 57);
        auto sv = Operand<float>{src.dev.permute({2, 1, 0}), src.host.permute({2, 1, 0})};
        auto out = poisoned<float>({3, 5, 401});
        const auto before = testing::launch_count();
        (out = sv.dev - 0.25f).run();
        expect("evaluate_strided", 3 * 3, before);
        check(out, [&](const auto& i) { return double(at(sv.host, i)) - 0.25; }, 0, 1e-7, "strided, middle dim cut");
    }
    {  // strided [3, 2500] into a transposed output: the last dim cut in runs of 992
        auto x = random_operand<float>({3, 2500}, 58);
        auto target = poisoned<float>({2500, 3});
        auto tv = target.permute({1, 0});
        const auto before = testing::launch_count();
        (tv = x.dev * x.dev).run();
        expect("evaluate_strided", 3 * 3, before);
        check(tv, [&](const auto& i) { return double(at(x.host, i)) * double(at(x.host, i)); }, 0, 1e-7, "strided, last dim cut");
    }
}

TEST_CASE("in-place updates and the aliasing rules", "[ops][expression]") {
    const std::int64_t n = testing::large(1000003);
    auto a = random_operand<float>({n}, 41), b = random_operand<float>({n}, 42);
    (a.dev += b.dev * 2).run();
    (a.dev *= 0.5f).run();
    check(a.dev, [&](const auto& i) { return (double(at(a.host, i)) + 2.0 * double(at(b.host, i))) * 0.5; }, 1e-6, 1e-6, "+= *=");

    auto v = random_operand<float>({100}, 43);
    // Reading a shifted copy of the output: element i would read i-1 after it was overwritten.
    CHECK_THROWS_WITH((v.dev.slice(0, 1, 100) = v.dev.slice(0, 0, 99) + 1).run(),
                      Catch::Contains("overlaps the output") && Catch::Contains(".clone()"));
    // Disjoint halves of one buffer are fine.
    (v.dev.slice(0, 50, 100) = v.dev.slice(0, 0, 50) * 2).run();
    const auto got = v.dev.to_vector();
    std::size_t wrong = 0;  // the written half holds twice the other (its old random values would not), which keeps its values
    for (std::size_t i = 0; i < 100; ++i)
        wrong += got[i] != (i < 50 ? v.host.data()[i] : float(double(v.host.data()[i - 50]) * 2));
    CHECK(wrong == 0);
    // A broadcast output would write one element many times.
    auto one = zeros<float>({1});
    CHECK_THROWS_WITH((one.expand({8}) = b.dev.slice(0, 0, 8) + 1).run(), Catch::Contains("repeats elements"));
    CHECK_THROWS_WITH((one = b.dev.slice(0, 0, 8) + 1).run(), Catch::Contains("does not broadcast to the output's shape [1]"));
    CHECK_THROWS_AS(evaluate(empty<float>({3}) + empty<float>({4})), InvalidArgument);
    auto host = zeros<float>({8}, {.space = MemorySpace::host});
    auto dev8 = zeros<float>({8});
    CHECK_THROWS_WITH((dev8 = host * 2).run(), Catch::Contains("is in host memory"));
    CHECK_THROWS_WITH((host = b.dev.slice(0, 0, 8) * 2).run(), Catch::Contains("the output is in host memory"));
}

#ifndef TESSEL_TEST_UNDER_TSAN  // value tests: not built under ThreadSanitizer (see the top)
// ---- casts ----------------------------------------------------------------------------------------

namespace {
// float -> bfloat16 round-to-nearest-even on the bits, independent of CUDA's conversion.
double bf16_rne(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
    float r;
    std::memcpy(&r, &u, 4);
    return r;
}
}  // namespace

TEST_CASE("casts round to nearest even and fp8 saturates", "[ops][expression]") {
    const std::int64_t n = 4097;
    auto x = random_operand<float>({n}, 51, -300, 300);
    auto bf = poisoned<__nv_bfloat16>({n});
    (bf = cast_to<__nv_bfloat16>(x.dev)).run();
    check(bf, [&](const auto& i) { return bf16_rne(at(x.host, i)); }, 0, 0, "float -> bfloat16");
    auto back = poisoned<float>({n});
    (back = cast_to<__nv_bfloat16>(x.dev) - x.dev).run();  // the rounding error, computed in float
    check(back, [&](const auto& i) { return bf16_rne(at(x.host, i)) - double(at(x.host, i)); }, 0, 0, "rounding error");

    auto big = from_host<float>({1000.f, -1000.f, 448.f, 17.f, 0.0f}, {5});
    auto f8 = poisoned<__nv_fp8_e4m3>({5});
    (f8 = cast_to<__nv_fp8_e4m3>(big)).run();
    check(f8, [](const auto& i) { return std::array<double, 5>{448, -448, 448, 16, 0}[std::size_t(i[0])]; }, 0, 0,
          "fp8 e4m3 saturates at 448 and rounds 17 to 16");
}
#endif  // TESSEL_TEST_UNDER_TSAN
