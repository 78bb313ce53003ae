// Casts (float32 to and from every dtype, round to nearest even, saturation, NaN), int8
// quantisation per tensor and per channel, the fused unscale-and-check over a list of tensors, and
// DynamicLossScaler on a scripted sequence of overflowing and clean steps. References are host code
// written independently of the library's conversions.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include <tessel/ops/amp.hpp>
#include <tessel/ops/quantize.hpp>

#include "../support/device_array.hpp"

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
    auto y = empty<T>(x.shape());
    rt::memset_async(y.data(), 0xFF, std::size_t(y.numel()) * sizeof(T), current_stream().handle());
    (y = cast_to<T>(x)).run();
    const auto got = y.to_vector();
    std::size_t bad = 0;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const double want = round_format(v[i], mant, min_exp, max_finite, saturate), have = convert<double>(got[i]);
        const bool ok = (std::isnan(want) && std::isnan(have)) || want == have;
        if (!ok && bad++ < 5) WARN(name << ": " << v[i] << " -> " << have << ", expected " << want);
    }
    INFO(name << ": " << bad << " of " << v.size() << " conversions wrong");
    CHECK(bad == 0);
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
    CHECK_THROWS_WITH(quantize(x, QuantParams{0.0, 0}), Catch::Contains("scale must be positive"));
    CHECK_THROWS_WITH(quantize(x, ChannelQuantParams{empty<float>({3}), empty<std::int32_t>({3}), 0}),
                      Catch::Contains("scale must have shape [7]"));
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
