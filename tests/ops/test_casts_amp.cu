// Casts (float32 to and from every dtype, round to nearest even, saturation, NaN), int8
// quantisation per tensor and per channel, the fused unscale-and-check over a list of tensors, and
// DynamicLossScaler on a scripted sequence of overflowing and clean steps. References are host code
// written independently of the library's conversions.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <random>
#include <span>
#include <tuple>

#include <tessel/ops/amp.hpp>
#include <tessel/ops/copy.hpp>
#include <tessel/ops/quantize.hpp>

#include "../support/device_array.hpp"
#include "../support/gate.hpp"
#include "../support/random_tensor.hpp"

using namespace tessel;

namespace {

// Round to nearest even with `mant` stored mantissa bits, smallest normal exponent `min_exp`, largest
// finite value `max_finite`; beyond it: saturate, or infinity once past the rounding midpoint.
double round_format(double x, int mant, int min_exp, double max_finite, bool saturate) {
    if (std::isnan(x) || x == 0) return x;
    const int e = std::max(int(std::floor(std::log2(std::fabs(x)))), min_exp);
    const double ulp = std::ldexp(1.0, e - mant);
    double r = std::nearbyint(x / ulp) * ulp;  // the default rounding mode rounds ties to even
    if (std::fabs(r) > max_finite) r = saturate ? std::copysign(max_finite, x) : std::copysign(INFINITY, x);
    return r;
}

std::vector<float> test_floats(std::size_t n, std::uint64_t seed) {
    const auto u = testing::random_vector<double>(n, seed, 0, 1);
    const auto e = testing::random_vector<double>(n, seed + 1, -30, 20);
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = float((u[i] < 0.5 ? -1 : 1) * std::exp2(e[i]) * (1 + u[i]));
    // Exact ties and edges: 1 + half an ulp of each format, overflow and the largest values.
    for (float t : {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-4f, 1.0f + 3 * 0x1p-4f,
                    65504.f, 65519.f, 65520.f, 448.f, 464.f, 1e6f, -1e6f, 57344.f, 0x1p-24f, 0x1p-25f, 3e-8f, 0.f, -0.f})
        v.push_back(t);
    v.push_back(std::numeric_limits<float>::quiet_NaN());
    return v;
}

template <class T>
void check_cast_from_float(const char* name, int mant, int min_exp, double max_finite, bool saturate) {
    const auto v = test_floats(4001, 7);
    const auto x = from_host<float>(std::span<const float>(v), {std::int64_t(v.size())});
    // Twice, over two poisons: an unwritten element shows under one of them whatever it should hold
    // (0xFF is NaN, as the conversion of a NaN; 0x5A is a finite value in every format).
    auto y = empty<T>(x.shape());
    for (const int poison : {0x5A, 0xFF}) {
        rt::memset_async(y.data(), poison, std::size_t(y.numel()) * sizeof(T), current_stream().handle());
        (y = cast_to<T>(x)).run();
        const auto got = y.to_vector();
        std::size_t bad = 0;
        for (std::size_t i = 0; i < v.size(); ++i) {
            const double want = round_format(v[i], mant, min_exp, max_finite, saturate), have = convert<double>(got[i]);
            const bool ok = (std::isnan(want) && std::isnan(have)) || want == have;
            if (!ok && bad++ < 5) WARN(name << ": " << v[i] << " -> " << have << ", expected " << want);
        }
        INFO(name << ": " << bad << " of " << v.size() << " conversions wrong (poison " << poison << ")");
        CHECK(bad == 0);
    }
    const auto got = y.to_vector();
    // And back to float exactly.
    auto back = empty<float>(x.shape());
    (back = cast_to<float>(y)).run();
    const auto b = back.to_vector();
    std::size_t lost = 0;
    for (std::size_t i = 0; i < v.size(); ++i) lost += !(b[i] == float(convert<double>(got[i])) || (std::isnan(b[i]) && std::isnan(convert<double>(got[i]))));
    CHECK(lost == 0);
}

template <class I>
void check_cast_to_int() {
    const std::vector<float> v = {0.f, 0.9f, -0.9f, 1.5f, -1.5f, 126.7f, 127.f, 128.f, 300.f, -129.f, -300.f, 1e10f, -1e10f,
                                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN(), 65535.9f, 2147483520.f};
    const auto x = from_host<float>(std::span<const float>(v), {std::int64_t(v.size())});
    auto y = empty<I>(x.shape());
    (y = cast_to<I>(x)).run();
    const auto got = y.to_vector();
    for (std::size_t i = 0; i < v.size(); ++i) {
        const double lo = double(std::numeric_limits<I>::lowest()), hi = double(std::numeric_limits<I>::max());
        const double want = std::isnan(v[i]) ? 0.0 : std::clamp(std::trunc(double(v[i])), lo, hi);
        INFO("float " << v[i] << " to " << dtype_traits<I>::name);
        CHECK(double(got[i]) == want);
    }
}

// unscale_and_check over the list with a zeroed found-flag: the flag afterwards (0: every element
// finite). The flag is read back, so the call has completed on return.
template <class T>
unsigned unscale_found(const std::vector<Tensor<T>>& grads, float inv_scale) {
    unsigned* flag = static_cast<unsigned*>(memory::allocate(sizeof(unsigned)));
    rt::memset_async(flag, 0, sizeof(unsigned), current_stream().handle());
    unscale_and_check(std::span<const Tensor<T>>(grads), inv_scale, flag, current_stream().handle());
    unsigned found = 7;
    rt::memcpy(&found, flag, sizeof found);
    memory::deallocate(flag);
    return found;
}

// The flag of an unscale (scale 1) with `bad` written at element `at` of tensor k; the element is
// 0 again afterwards.
template <class T>
unsigned found_with(const std::vector<Tensor<T>>& grads, std::size_t k, std::size_t at, T bad) {
    rt::memcpy(grads[k].data() + at, &bad, sizeof bad);
    const unsigned found = unscale_found(grads, 1.f);
    const T zero = T(0.f);
    rt::memcpy(grads[k].data() + at, &zero, sizeof zero);
    return found;
}

// ---- to<U>(): every pair of dtypes ------------------------------------------------------------

// The exact value of an element as a double, through the vendor's own conversions (cuda_fp16.h,
// cuda_bf16.h, cuda_fp8.h), not tessel's; a bool's byte as 0 or 1, or 2 when it is neither.
template <class T>
double exact_value(const T& x) {
    if constexpr (std::is_same_v<T, bool>) {
        std::uint8_t byte = 0;
        std::memcpy(&byte, &x, 1);
        return byte > 1 ? 2.0 : double(byte);
    } else if constexpr (std::is_same_v<T, __half>) return double(__half2float(x));
    else if constexpr (std::is_same_v<T, __nv_bfloat16>) return double(__bfloat162float(x));
    else if constexpr (std::is_same_v<T, __nv_fp8_e4m3> || std::is_same_v<T, __nv_fp8_e5m2>) return double(float(x));
    else return double(x);
}

// Values of T exactly representable as doubles: random ones over T's range (floating: magnitudes
// 2^-30 to 2^40 and beyond the integer types), and edges: zeros, halves, the integer types' bounds,
// the reduced formats' ties and overflows, NaN and infinities.
template <class T>
Tensor<T> to_test_values(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::deque<T> v;  // not std::vector: vector<bool> has no data()
    if constexpr (std::is_same_v<T, bool>) {
        for (std::size_t i = 0; i < n; ++i) v.push_back(rng() % 2 == 1);
    } else if constexpr (std::is_integral_v<T>) {
        const bool wide = sizeof(T) == 8;  // int64: 41-bit values (exact in double, not all in float), and a few edges
        for (std::size_t i = 0; i < n; ++i)
            v.push_back(wide ? T(std::int64_t(rng() % (std::uint64_t(1) << 41)) - (std::int64_t(1) << 40)) : T(rng()));
        v.push_back(std::numeric_limits<T>::lowest());
        v.push_back(std::numeric_limits<T>::max() - T(wide ? 1023 : 0));  // int64: 2^63 - 1024, exact in double
        if constexpr (sizeof(T) >= 4)  // above a bf16 tie by 1: through float (2^24 + 2^16, a tie) it came to 2^24
            for (std::int64_t e : {(std::int64_t(1) << 24) + (std::int64_t(1) << 16) + 1, -((std::int64_t(1) << 30) + (std::int64_t(1) << 22) + 1)})
                v.push_back(T(e));
        if constexpr (sizeof(T) == 8) {
            for (std::int64_t e : {std::int64_t(1) << 62, (std::int64_t(1) << 40) + 1, -((std::int64_t(1) << 53) + 2), std::int64_t(128),
                                   std::int64_t(-129), std::int64_t(256)})
                v.push_back(T(e));
        }
    } else {
        std::uniform_real_distribution<double> u(0, 1), e(-30, 40);
        std::vector<double> d;
        for (std::size_t i = 0; i < n; ++i) d.push_back((u(rng) < 0.5 ? -1 : 1) * std::exp2(e(rng)) * (1 + u(rng)));
        for (double x : {0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 127.5, 128.0, 255.9, 256.0, -129.0, 3e9, -3e9, 1e10, 1e19, -1e19, 65519.0,
                         65520.0, 464.0, 1e6, 1.0 + 0x1p-11, 1.0 + 0x1p-8, 1.0 + 0x1p-24 + 0x1p-50, 1e300, -1e300, 3.5e38,
                         3e-5, -1e-40, 1e-310, 0x1p-9,  // subnormal in fp16, float, double; e4m3's smallest
                         // Just above a tie of half, bf16, e4m3, e5m2 (and below one): through float they round twice
                         1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 + 0x1p-40, 1.0 + 0x1p-4 + 0x1p-40, -1.0 - 0x1p-3 - 0x1p-40,
                         1.0 + 0x1p-11 - 0x1p-40,
                         double(std::numeric_limits<float>::quiet_NaN()), HUGE_VAL, -HUGE_VAL})
            d.push_back(x);
        for (double x : d) {
            // Beyond float's range a double -> float conversion is undefined in C++: the narrower
            // types take those as infinities.
            if (sizeof(T) < 8 && std::isfinite(x) && std::fabs(x) > double(std::numeric_limits<float>::max())) x = std::copysign(HUGE_VAL, x);
            v.push_back(testing::from_double<T>(x));
        }
    }
    if (v.size() % 2 == 0) v.push_back(T(1));  // an odd count: the vector kernel's tail always runs
    Tensor<T> t = empty<T>({std::int64_t(v.size())}, {.space = MemorySpace::host});
    std::copy(v.begin(), v.end(), t.data());
    return t;
}

// Rounds x to nearest even in a format (round_format above), with infinities kept, or saturated
// to the largest finite value for the fp8 formats.
double round_to(double x, int mant, int min_exp, double max_finite, bool saturate) {
    if (std::isinf(x)) return saturate ? std::copysign(max_finite, x) : x;
    return round_format(x, mant, min_exp, max_finite, saturate);
}

// What converting the exact value x (of a floating source type or not) to U gives, written from
// the rules in docs/expressions.md: reduced floats round x once (not through float32, which rounds
// twice: double 1 + 2^-11 + 2^-40 would give half 1), floating to integer
// truncates and saturates with NaN as 0, integers wrap to narrower integers, bool is x != 0.
template <class U>
double expected_conversion(double x, bool floating_source) {
    const auto f32 = [](double y) { return round_to(y, 23, -126, double(std::numeric_limits<float>::max()), false); };
    if constexpr (std::is_same_v<U, bool>) return x != 0 ? 1 : 0;  // NaN != 0
    else if constexpr (std::is_same_v<U, double>) return x;
    else if constexpr (std::is_same_v<U, float>) return f32(x);
    else if constexpr (std::is_same_v<U, __half>) return round_to(x, 10, -14, 65504, false);
    else if constexpr (std::is_same_v<U, __nv_bfloat16>) return round_to(x, 7, -126, 0x1.fep127, false);
    else if constexpr (std::is_same_v<U, __nv_fp8_e4m3>) return round_to(x, 3, -6, 448, true);
    else if constexpr (std::is_same_v<U, __nv_fp8_e5m2>) return round_to(x, 2, -14, 57344, true);
    else if (floating_source) {
        if (std::isnan(x)) return 0;
        return std::clamp(std::trunc(x), double(std::numeric_limits<U>::lowest()), double(std::numeric_limits<U>::max()));
    } else if constexpr (sizeof(U) == 8) {  // int64 from an integer: the value itself
        return x;
    } else {  // two's complement wrap to the low bits
        constexpr unsigned bits = 8 * sizeof(U);
        const std::uint64_t low = std::uint64_t(std::int64_t(x)) & ((std::uint64_t(1) << bits) - 1);
        if (std::is_signed_v<U> && (low >> (bits - 1)) != 0) return double(std::int64_t(low) - (std::int64_t(1) << bits));
        return double(low);
    }
}

// Counts the elements of `got` that differ from the expected conversions of the source values
// src(0), src(1), ... (host copies of T).
template <class T, class U, class Src>
std::size_t wrong_conversions(Src&& src, const Tensor<U>& got) {
    const Tensor<U> h = got.contiguous().to_host();
    std::size_t bad = 0;
    for (std::int64_t i = 0; i < h.numel(); ++i) {
        const T x = src(i);
        const double want = expected_conversion<U>(exact_value(x), dtype_traits<T>::is_floating);
        const double have = exact_value(h.data()[i]);
        const bool same_sign = !dtype_traits<U>::is_floating || std::signbit(want) == std::signbit(have);  // -0.0 stays -0.0
        const bool ok = (std::isnan(want) && std::isnan(have)) || (want == have && same_sign);
        if (!ok && bad++ < 3)
            WARN(dtype_traits<T>::name << " " << exact_value(x) << " -> " << dtype_traits<U>::name << " " << have << ", expected " << want);
    }
    return bad;
}

template <class T, class U>
void check_to_dtype(const Tensor<T>& values) {
    INFO(dtype_traits<T>::name << " -> " << dtype_traits<U>::name);
    const std::int64_t n = values.numel();
    const T* v = values.data();
    const auto at = [&](std::int64_t offset) { return [=](std::int64_t i) { return v[offset + i]; }; };
    const Tensor<T> base = values.to(MemorySpace::device);
    for (int byte : {0xFF, 0x5A}) {  // two poisons: an unwritten element cannot match both
        INFO("poison " << byte);
        // Aligned and contiguous: the vector kernel and its tail, one launch.
        testing::poison_next<U>({n}, byte);
        auto before = testing::launch_count();
        const Tensor<U> whole = base.template to<U>();
        if (backend == Backend::sim && !std::is_same_v<T, U>) {  // to<T>() is a copy (clone())
            CHECK(testing::launch_count() - before == 1);
            CHECK(testing::last_kernel().find("convert") != std::string::npos);
        }
        CHECK(whole.shape() == Shape{n});
        CHECK(whole.space() == MemorySpace::device);
        CHECK(wrong_conversions<T>(at(0), whole) == 0);
        // One element in: the element kernel.
        testing::poison_next<U>({n - 1}, byte);
        CHECK(wrong_conversions<T>(at(1), base.narrow(0, 1, n - 1).template to<U>()) == 0);
    }
    // A transposed view: gathered, then converted (two launches); the result keeps the view's shape.
    const std::int64_t rows = 7, cols = (n - 1) / rows;
    const Tensor<T> t = base.narrow(0, 1, rows * cols).reshape({rows, cols}).transpose(0, 1);
    auto before = testing::launch_count();
    const Tensor<U> tu = t.template to<U>();
    if (backend == Backend::sim) CHECK(testing::launch_count() - before == (std::is_same_v<T, U> ? 1u : 2u));
    CHECK(tu.shape() == Shape{cols, rows});
    CHECK(wrong_conversions<T>([&](std::int64_t k) { return v[1 + (k % rows) * cols + k / rows]; }, tu) == 0);
    // Host memory converts on the host, by the same rules.
    const Tensor<U> on_host = values.template to<U>();
    CHECK(on_host.space() == MemorySpace::host);
    CHECK(wrong_conversions<T>(at(0), on_host) == 0);
}

template <class T, class... U>
void check_to_every_dtype(std::tuple<U...>*) {
    const Tensor<T> values = to_test_values<T>(1000, 11);
    (check_to_dtype<T, U>(values), ...);
}

using AllDtypes = std::tuple<double, float, __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2, std::int8_t, std::uint8_t, std::int32_t,
                             std::int64_t, bool>;

}  // namespace

TEST_CASE("float32 casts round to nearest even; fp8 saturates; NaN stays NaN", "[ops][cast]") {
    check_cast_from_float<__half>("float16", 10, -14, 65504, false);
    check_cast_from_float<__nv_bfloat16>("bfloat16", 7, -126, 0x1.fep127, false);
    check_cast_from_float<__nv_fp8_e4m3>("fp8 e4m3", 3, -6, 448, true);
    check_cast_from_float<__nv_fp8_e5m2>("fp8 e5m2", 2, -14, 57344, true);
    check_cast_from_float<double>("float64", 52, -1022, 1.7976931348623157e308, false);
}

TEST_CASE("float to integer casts truncate and saturate; NaN gives 0", "[ops][cast]") {
    check_cast_to_int<std::int8_t>();
    check_cast_to_int<std::uint8_t>();
    check_cast_to_int<std::int32_t>();
    check_cast_to_int<std::int64_t>();
    auto b = from_host<float>({0.f, -0.f, 2.f, std::numeric_limits<float>::quiet_NaN()}, {4});
    auto y = empty<bool>({4});
    (y = cast_to<bool>(b)).run();
    const auto h = y.to_host();
    CHECK((!h({0}) && !h({1}) && h({2}) && h({3})));  // NaN is non-zero, as in C++ and PyTorch
}

#ifndef TESSEL_TEST_UNDER_TSAN  // [slow_under_tsan]: not built under ThreadSanitizer (tests/CMakeLists.txt)
// to<U>() of device tensors: one kernel per conversion (a gather first for a strided view), for
// every pair of the 11 dtypes, against the rules written out above on 1001-1035 values (an odd
// count: the vector kernel's tail runs), a view one element in (the element kernel) and a transpose.
TEMPLATE_TEST_CASE("to<U>() converts device tensors on the device, every pair of dtypes", "[tensor][cast][slow_under_tsan]", double,
                   float, __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2, std::int8_t, std::uint8_t, std::int32_t, std::int64_t,
                   bool) {
    check_to_every_dtype<TestType>(static_cast<AllDtypes*>(nullptr));
}
#endif  // TESSEL_TEST_UNDER_TSAN

// arange() of device memory: one kernel, start + i * step computed in double (one fused
// multiply-add, as on the host) and converted by the same rules; odd counts, a negative step, steps that round in the narrow
// types, on outputs poisoned twice; and the element kernel on an interior (unaligned) range.
TEMPLATE_TEST_CASE("arange fills device memory with one kernel", "[tensor][cast]", double, float, __half, __nv_bfloat16, __nv_fp8_e4m3,
                   __nv_fp8_e5m2, std::int8_t, std::uint8_t, std::int32_t, std::int64_t, bool) {
    using T = TestType;
    struct Range {
        double start, stop, step;
    };
    std::vector<Range> ranges = {{0, 2, 1}};
    if constexpr (!std::is_same_v<T, bool>) ranges.push_back({3, 126, 7});
    constexpr bool integral = std::is_integral_v<T> && !std::is_same_v<T, bool>;
    // An integer arange steps by whole numbers from a whole start (both truncated, as torch's).
    if constexpr (std::is_signed_v<T> || dtype_traits<T>::is_floating) ranges.push_back({100.25, -27, integral ? -1.75 : -0.75});
    if constexpr (dtype_traits<T>::is_floating) ranges.push_back({-1.5, double(testing::large(100003)) * 1e-3, 1e-3});
    if constexpr (sizeof(T) >= 4 && !dtype_traits<T>::is_floating) ranges.push_back({-5, double(testing::large(1000003)), 1});
    for (const Range& r : ranges) {
        const auto n = std::int64_t(std::ceil((r.stop - r.start) / r.step));
        INFO("arange(" << r.start << ", " << r.stop << ", " << r.step << "): " << n << " elements");
        for (int byte : {0xFF, 0x5A}) {
            testing::poison_next<T>({n}, byte);
            const auto before = testing::launch_count();
            const Tensor<T> t = arange<T>(r.start, r.stop, r.step);
            if (backend == Backend::sim) {
                CHECK(testing::launch_count() - before == 1);
                CHECK(testing::last_kernel().find("arange") != std::string::npos);
            }
            REQUIRE(t.shape() == Shape{n});
            const Tensor<T> h = t.to_host();
            std::size_t bad = 0;
            for (std::int64_t i = 0; i < n; ++i) {
                const double start = integral ? std::trunc(r.start) : r.start, step = integral ? std::trunc(r.step) : r.step;
                const double want = expected_conversion<T>(std::fma(double(i), step, start), true), have = exact_value(h.data()[i]);
                if (want != have && bad++ < 3) WARN("element " << i << ": " << have << ", expected " << want);
            }
            CHECK(bad == 0);
        }
    }
    // The element kernel: 33 elements one in from an aligned block, whose neighbours keep their poison.
    Tensor<T> block = empty<T>({40});
    rt::memset_async(block.data(), 0x5A, 40 * sizeof(T), current_stream().handle());
    ops::arange_device(block.data() + 1, dtype_of<T>, 33, 0, 1, current_stream().handle(), block.device());
    const Tensor<T> h = block.to_host();
    for (std::int64_t i = 0; i < 40; ++i) {
        INFO("element " << i);
        const bool inside = i >= 1 && i <= 33;
        std::uint8_t poison[sizeof(T)];
        std::memset(poison, 0x5A, sizeof(T));
        if (inside) CHECK(exact_value(h.data()[i]) == expected_conversion<T>(double(i - 1), true));
        else CHECK(std::memcmp(h.data() + i, poison, sizeof(T)) == 0);
    }
}

TEST_CASE("an integer arange counts in the given numbers and steps in whole ones, as torch's", "[tensor][cast]") {
    for (MemorySpace space : {MemorySpace::device, MemorySpace::host}) {
        INFO(space_name(space));
        const TensorOptions o{.space = space};
        CHECK(arange<std::int32_t>(-0.5, 2, 1, o).to_vector() == std::vector<std::int32_t>{0, 1, 2});
        CHECK(arange<std::int32_t>(0.5, 3.7, 1.3, o).to_vector() == std::vector<std::int32_t>{0, 1, 2});
        CHECK(arange<std::int64_t>(2.9, -1.2, -1.5, o).to_vector() == std::vector<std::int64_t>{2, 1, 0});
        CHECK(arange<std::int8_t>(0, 0.5, 0.5, o).to_vector() == std::vector<std::int8_t>{0});  // one element: the step is never taken
        CHECK_THROWS_WITH(arange<std::int8_t>(0, 2, 0.5, o), Catch::Contains("step 0.5 is 0 in int8"));
        CHECK(arange<float>(-0.5, 2, 1, o).to_vector() == std::vector<float>{-0.5f, 0.5f, 1.5f});
    }
}

// int64 values beyond 2^53, where doubles skip integers: computed in integers on both paths, every
// value distinct and exact (start + i * step written out in integer arithmetic), up to int64's end.
TEST_CASE("arange of int64 is exact beyond 2^53, on the device and the host", "[tensor][cast]") {
    struct Range {
        double start, stop, step;  // each a double exactly
    };
    const Range ranges[] = {{0x1p53 - 6, 0x1p53 + 1030, 1}, {0x1p63 - 4096, 0x1p63, 3}, {-0x1p60, -0x1p60 - 4096, -7}};
    for (const Range& r : ranges)
        for (MemorySpace space : {MemorySpace::device, MemorySpace::host}) {
            const __int128 first = __int128(r.start), span = __int128(r.stop) - first, step = __int128(r.step);
            const auto n = std::int64_t(span / step + (span % step != 0));
            INFO("arange(" << r.start << ", " << r.stop << ", " << r.step << ") in " << space_name(space) << " memory: " << n << " elements");
            if (space == MemorySpace::device) testing::poison_next<std::int64_t>({n}, 0x5A);
            const Tensor<std::int64_t> t = arange<std::int64_t>(r.start, r.stop, r.step, {.space = space});
            REQUIRE(t.shape() == Shape{n});
            const auto v = t.to_vector();
            std::size_t bad = 0;
            for (std::int64_t i = 0; i < n; ++i) bad += __int128(v[std::size_t(i)]) != first + i * step;
            CHECK(bad == 0);
        }
    // A last value of 2^63 + 1024 is beyond int64, though in doubles it rounds to 2^63 and passed.
    CHECK_THROWS_WITH(arange<std::int64_t>(0x1p63 - 1024, 0x1p63 + 2048, 1024), Catch::Contains("beyond the range of int64"));
    CHECK_THROWS_WITH(arange<std::int64_t>(0x1p63, 0x1p63 + 2048, 1024), Catch::Contains("beyond the range of int64"));
    // Integer numbers that are no doubles: counted and stepped in integers (through doubles,
    // 2^53 + 1 would be 2^53, and the first range 8 elements from 2^53).
    constexpr std::int64_t big = (std::int64_t(1) << 53) + 1, top = std::numeric_limits<std::int64_t>::max();
    for (MemorySpace space : {MemorySpace::device, MemorySpace::host}) {
        INFO(space_name(space));
        if (space == MemorySpace::device) testing::poison_next<std::int64_t>({7}, 0x5A);
        CHECK(arange<std::int64_t>(big, big + 7, 1, {.space = space}).to_vector() ==
              std::vector<std::int64_t>{big, big + 1, big + 2, big + 3, big + 4, big + 5, big + 6});
        CHECK(arange<std::int64_t>(top, top - 10, -4, {.space = space}).to_vector() == std::vector<std::int64_t>{top, top - 4, top - 8});
        CHECK(arange<std::int64_t>(-top, -top + 5, top, {.space = space}).to_vector() == std::vector<std::int64_t>{-top});
        CHECK(arange<std::int64_t>(big, big - 3, 2, {.space = space}).numel() == 0);  // the step leads away from stop
    }
    CHECK_THROWS_WITH(arange<std::int64_t>(0ull, ~0ull), Catch::Contains("must be int64 values"));
    CHECK_THROWS_WITH(arange<std::int64_t>(-top, top, 1), Catch::Contains("more elements than a tensor can index"));
    CHECK(arange<std::int32_t>(3, 10, 3).to_vector() == std::vector<std::int32_t>{3, 6, 9});  // small integers: the double path
}

// to<U>() returns with its kernel queued; the source, allocated on another stream and dropped at
// once, must not be reused by that stream before the kernel has read it. Stream b is held at a gate
// so the conversion runs late; stream a allocates and fills a tensor of the same size meanwhile.
TEST_CASE("to<U>() keeps its source's memory until the conversion has read it", "[tensor][cast]") {
    const Stream a = Stream::create(), b = Stream::create();
    const std::int64_t n = 1 << 16;
    std::vector<float> values(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = float(i % 256) * 0.5f;  // exact in bf16 (at most 8 bits)
    Tensor<float> src = from_host<float>(std::span<const float>(values), {n}, {.stream = a.handle()});
    a.synchronize();
    const testing::Gate gate;
    gate.hold(b);
    Tensor<__nv_bfloat16> out;
    {
        const StreamGuard on_b(b);
        out = src.to<__nv_bfloat16>();
    }
    src = Tensor<float>();  // the last reference: the block goes back to a's cache
    const Tensor<float> reuse = full<float>({n}, -7.f, {.stream = a.handle()});
    {
        // The fill lands while b is held (in the source's memory if that was given back too early).
        // Under ThreadSanitizer the sim runs one grid at a time, so the fill waits for the gate
        // there: the gate opens 50 ms from now either way.
        const std::jthread opener = gate.open_later();
        a.synchronize();
    }
    b.synchronize();
    const auto got = out.to_vector();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) bad += float(got[i]) != values[i];
    CHECK(bad == 0);
}

// A tensor on another device than the current one converts there, on that device's current stream.
TEST_CASE("to<U>() and arange run on the tensor's own device", "[.multidevice]") {
    REQUIRE(device_count() >= 3);
    const Device other{2};
    const Tensor<float> x = arange<float>(-2.5, 97, 0.5, {.device = other});
    CHECK(x.device() == other);
    const Tensor<__nv_bfloat16> y = x.to<__nv_bfloat16>();
    CHECK(y.device() == other);
    const Tensor<std::int8_t> z = x.narrow(0, 0, 198).reshape({18, 11}).transpose(0, 1).to<std::int8_t>();  // gathered there too
    CHECK(z.device() == other);
    const auto yv = y.to_vector();
    const auto zv = z.to_vector();
    std::size_t bad = 0;
    const auto value = [](std::int64_t i) { return -2.5 + 0.5 * double(i); };  // exact in bf16 (at most 8 significant bits)
    for (std::size_t i = 0; i < yv.size(); ++i) bad += exact_value(yv[i]) != value(std::int64_t(i));
    for (std::int64_t k = 0; k < 198; ++k) bad += double(zv[std::size_t(k)]) != std::trunc(value((k % 18) * 11 + k / 18));
    CHECK(yv.size() == 199);
    CHECK(bad == 0);
    CHECK(current_device().index == 0);
}

TEST_CASE("int8 quantisation per tensor and per channel", "[ops][quantize]") {
    const std::int64_t rows = 7, cols = 1031;
    const auto r = testing::random_vector<double>(std::size_t(rows * cols), 3, -3, 5);
    std::vector<float> v(r.begin(), r.end());
    for (std::int64_t c = 0; c < cols; ++c) v[std::size_t(3 * cols + c)] *= 10;  // a row with a wider range
    const auto x = from_host<float>(std::span<const float>(v), {rows, cols});

    for (bool symmetric : {true, false}) {
        INFO((symmetric ? "symmetric" : "asymmetric"));
        const QuantParams p = choose_qparams(x, symmetric);
        const auto q = quantize(x, p).to_vector();
        const auto dq = dequantize(quantize(x, p), p).to_vector();
        std::size_t bad = 0;
        for (std::size_t i = 0; i < v.size(); ++i) {
            const double want = std::clamp(std::nearbyint(double(v[i] / float(p.scale))) + p.zero_point, -128.0, 127.0);
            bad += double(q[i]) != want;
            bad += std::fabs(dq[i] - float((want - p.zero_point) * float(p.scale))) > 1e-6f * std::fabs(dq[i]);
        }
        CHECK(bad == 0);
        double worst = 0;  // within the covered range the round trip is within half a step
        for (std::size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::fabs(double(dq[i]) - v[i]) / p.scale);
        CHECK(worst <= 0.5 + 1e-4);

        const ChannelQuantParams cp = choose_channel_qparams(x, 0, symmetric);
        const auto cq = quantize(x, cp).to_vector();
        const auto scale = cp.scale.to_vector();
        const auto zp = cp.zero_point.to_vector();
        const auto cdq = dequantize(quantize(x, cp), cp).to_vector();
        std::size_t cbad = 0;
        double cworst = 0;
        for (std::int64_t row = 0; row < rows; ++row) {
            double lo = 0, hi = 0;
            for (std::int64_t c = 0; c < cols; ++c) lo = std::min(lo, double(v[std::size_t(row * cols + c)])), hi = std::max(hi, double(v[std::size_t(row * cols + c)]));
            const double want_scale = symmetric ? std::max(-lo, hi) / 127 : (hi - lo) / 255;
            cbad += std::fabs(scale[std::size_t(row)] - want_scale) > 1e-6 * want_scale;
            for (std::int64_t c = 0; c < cols; ++c) {
                const std::size_t i = std::size_t(row * cols + c);
                const double want = std::clamp(std::nearbyint(double(v[i] / scale[std::size_t(row)])) + zp[std::size_t(row)], -128.0, 127.0);
                cbad += double(cq[i]) != want;
                cworst = std::max(cworst, std::fabs(double(cdq[i]) - v[i]) / scale[std::size_t(row)]);
            }
        }
        CHECK(cbad == 0);
        CHECK(cworst <= 0.5 + 1e-4);
    }
    // A channel whose finite range is wider than float's largest value: its scale is finite, as the
    // per-tensor one (hi - lo overflowed float: "channel 0 has scale inf").
    const auto wide = from_host<float>({-3e38f, 3e38f, 1.f, 2.f}, {2, 2});
    const ChannelQuantParams wp = choose_channel_qparams(wide, 0, false);
    const QuantParams row0 = choose_qparams(wide.narrow(0, 0, 1), false);
    CHECK(std::fabs(double(wp.scale.to_vector()[0]) - row0.scale) <= 1e-6 * row0.scale);
    CHECK(wp.zero_point.to_vector()[0] == row0.zero_point);
    const auto wq = quantize(wide, wp).to_vector();  // the range's ends: the ends of int8, within one rounding
    CHECK((wq[0] <= -127 && wq[1] == 127 && wq[3] == 127));
    CHECK_THROWS_WITH(quantize(x, QuantParams{0.0, 0}), Catch::Contains("scale must be positive"));
    CHECK_THROWS_WITH(quantize(x, ChannelQuantParams{empty<float>({3}), empty<std::int32_t>({3}), 0}),
                      Catch::Contains("scale must have shape [7]"));

    // A NaN has no code: it takes the zero point, so it dequantises to 0 (code 0 would give
    // -zero_point * scale); infinities saturate.
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    const std::vector<float> special = {nan, 1.f, -nan, inf, -inf, 2.f};
    const auto s = from_host<float>(std::span<const float>(special), {2, 3});
    for (int zero_point : {0, 3, -128, 127}) {
        INFO("zero point " << zero_point);
        const QuantParams p{0.5, zero_point};
        const auto q = quantize(s, p).to_vector();
        const auto want = [&](double v) { return std::int8_t(std::clamp(std::nearbyint(v / 0.5) + zero_point, -128.0, 127.0)); };
        CHECK(q == std::vector<std::int8_t>{std::int8_t(zero_point), want(1), std::int8_t(zero_point), 127, -128, want(2)});
        CHECK(dequantize(quantize(s, p), p).to_vector()[0] == 0.f);
        const ChannelQuantParams cp{from_host<float>({0.5f, 0.25f}, {2}), from_host<std::int32_t>({zero_point, -zero_point / 2}, {2}), 0};
        const auto cq = quantize(s, cp).to_vector();
        CHECK(cq[0] == std::int8_t(zero_point));
        CHECK(cq[2] == std::int8_t(zero_point));
        CHECK(cq[3] == 127);
        CHECK(cq[4] == -128);
        CHECK(dequantize(quantize(s, cp), cp).to_vector()[2] == 0.f);
    }
}

TEST_CASE("unscale_and_check: one fused pass over a list, inf and NaN detected", "[ops][amp]") {
    // 70 tensors: two launches of at most 64; sizes cross the 16384-element chunks.
    std::vector<Tensor<float>> grads;
    std::vector<std::vector<float>> want;
    for (int k = 0; k < 70; ++k) {
        const std::size_t n = std::size_t(k % 7 == 0 ? 16385 + k : 1 + 33 * k);
        const auto r = testing::random_vector<float>(n, std::uint64_t(k), -1, 1);
        std::vector<float> scaled(n);
        for (std::size_t i = 0; i < n; ++i) scaled[i] = r[i] * 1024.f;
        grads.push_back(from_host<float>(std::span<const float>(scaled), {std::int64_t(n)}));
        want.push_back(r);
    }
    CHECK(unscale_found(grads, 1.f / 1024) == 0);
    std::size_t bad = 0;
    for (int k = 0; k < 70; ++k) bad += grads[std::size_t(k)].to_vector() != want[std::size_t(k)];  // power-of-two scale: exact
    CHECK(bad == 0);
    for (float poison : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
        CHECK(found_with(grads, 67, 5, poison) == 1);  // tensor 67 is in the second launch's list
    auto host = zeros<float>({3}, {.space = MemorySpace::host});
    CHECK_THROWS_WITH(unscale_and_check(std::span<const Tensor<float>>(&host, 1), 1.f, nullptr, nullptr),
                      Catch::Contains("tensor 0 must be a contiguous device tensor"));
}

// The vector path (16-byte aligned tensors: 4 vectors in flight per thread) and the element path
// (views starting 1 element in), over sizes with tails that are not whole vectors and several
// chunks; every element is checked, so one the kernel skips keeps its unscaled value and fails.
TEMPLATE_TEST_CASE("unscale_and_check scales every element of aligned and unaligned tensors", "[ops][amp]", float, __nv_bfloat16,
                   double) {
    using T = TestType;
    const std::vector<std::size_t> sizes = {1, 7, 31, 16384 - 3, 16384 + 9, 3 * 16384 + 5, 40001};
    std::vector<Tensor<T>> bases, grads;
    std::vector<std::vector<T>> want;
    for (std::size_t k = 0; k < sizes.size() * 2; ++k) {
        const std::size_t n = sizes[k / 2];
        const std::int64_t offset = std::int64_t(k % 2);  // odd k: a view 1 element into its storage
        const auto r = testing::random_vector<float>(n + std::size_t(offset), std::uint64_t(100 + k), -1, 1);
        std::vector<T> scaled(r.size()), expect(n);
        for (std::size_t i = 0; i < r.size(); ++i) scaled[i] = T(r[i] * 256.f);  // exact in every T
        for (std::size_t i = 0; i < n; ++i) expect[i] = T(float(scaled[i + std::size_t(offset)]) / 256.f);
        bases.push_back(from_host<T>(std::span<const T>(scaled), {std::int64_t(scaled.size())}));
        grads.push_back(bases.back().narrow(0, offset, std::int64_t(n)));
        want.push_back(expect);
    }
    CHECK(unscale_found(grads, 1.f / 256) == 0);
    for (std::size_t k = 0; k < grads.size(); ++k) {
        const auto got = grads[k].contiguous().to_vector();
        std::size_t bad = 0;
        for (std::size_t i = 0; i < got.size(); ++i) bad += float(got[i]) != float(want[k][i]);  // power-of-two scale: exact
        INFO("tensor " << k << " of " << got.size() << " elements, offset " << k % 2);
        CHECK(bad == 0);
    }
    // A NaN in the last (tail) element of an aligned tensor and in the vector body of another.
    for (std::size_t k : {std::size_t(10), std::size_t(8)}) {
        const std::size_t at = k == 10 ? sizes[5] - 1 : 4097;
        INFO("NaN in tensor " << k << " at " << at);
        CHECK(found_with(grads, k, at, T(std::numeric_limits<float>::quiet_NaN())) == 1);
    }
}

TEST_CASE("double gradients are unscaled in double, as torch's", "[ops][amp]") {
    // Through float, 1 + 2^-40 would come back 1, 1e-300 0, and 1e300 as inf (a false overflow).
    const std::vector<double> values = {1 + 0x1p-40, 1e-300, 1e300, -3.25, 0x1p-1060};
    std::vector<double> scaled(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) scaled[i] = values[i] * 1024;  // a power of two: exact both ways
    const std::vector<Tensor<double>> grads{from_host<double>(std::span<const double>(scaled), {std::int64_t(scaled.size())})};
    CHECK(unscale_found(grads, 1.f / 1024) == 0);
    CHECK(grads[0].to_vector() == values);
}

TEST_CASE("DynamicLossScaler follows GradScaler on a scripted sequence", "[ops][amp]") {
    DynamicLossScaler scaler({.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 3});
    // true: this step's gradients overflow.
    const std::vector<bool> script = {false, false, false, true, false, false, true, true, false, false, false, false, false, false};
    double model_scale = 1024;  // the reference: GradScaler's update rule, written out
    int model_tracker = 0;
    auto g = from_host<__half>({__half(1.f), __half(-2.f), __half(0.5f)}, {3});
    for (std::size_t step = 0; step < script.size(); ++step) {
        INFO("step " << step);
        const float s = float(scaler.scale());
        auto grads = std::vector<Tensor<__half>>{evaluate(g * s)};
        if (script[step]) {
            const __half inf = __half(std::numeric_limits<float>::infinity());
            rt::memcpy(grads[0].data() + 1, &inf, sizeof inf);
        }
        scaler.unscale(grads);
        CHECK(scaler.found_nonfinite() == script[step]);
        if (!script[step]) CHECK(grads[0].to_vector()[1] == __half(-2.f));
        scaler.update();
        if (script[step]) {
            model_scale *= 0.5;
            model_tracker = 0;
        } else if (++model_tracker == 3) {
            model_scale *= 2;
            model_tracker = 0;
        }
        CHECK(scaler.scale() == model_scale);
        CHECK(scaler.clean_steps() == model_tracker);
    }
    CHECK(scaler.scale() == 1024);  // 1024 -> 2048 -> 1024 -> 512 -> 256 -> 512 -> 1024
    CHECK_THROWS_WITH(DynamicLossScaler({.init_scale = 1, .growth_factor = 0.5}), Catch::Contains("growth_factor > 1"));
}

// Every unscale writes the one flag: an overflow found on a stream held back by a slow kernel must
// reach found_nonfinite() though the last unscale, on another stream, finished long before (it
// synchronised the last stream only, and read a clean flag).
TEST_CASE("DynamicLossScaler sees an overflow unscaled on another stream than the last", "[ops][amp]") {
    // Stream a is held at a gate while the overflowing unscale waits behind it, and opened 50 ms
    // after found_nonfinite() is called: a scaler that synchronises only the last unscale's stream
    // (b) reads its flag before a's unscale has run, on a GPU as on the sim.
    const Stream a = Stream::create(), b = Stream::create();
    DynamicLossScaler scaler({.init_scale = 1});
    const auto overflowing = from_host<float>({1.f, std::numeric_limits<float>::infinity(), 3.f}, {3}, {.stream = a.handle()});
    const auto clean = from_host<float>({1.f, 2.f}, {2}, {.stream = b.handle()});
    a.synchronize();
    b.synchronize();
    const testing::Gate gate;
    gate.hold(a);
    scaler.unscale({overflowing}, a.handle());  // runs once the gate opens
    scaler.unscale({clean}, b.handle());
    std::jthread opener = gate.open_later();
    const bool found = scaler.found_nonfinite();
    opener.join();
    CHECK(found);
    scaler.update();
    CHECK(scaler.scale() == 0.5);
    CHECK(clean.to_vector() == std::vector<float>{1.f, 2.f});
}
