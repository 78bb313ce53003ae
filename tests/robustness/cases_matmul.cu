// Bad input to matmul: shapes that do not multiply or broadcast, outputs of the wrong shape, place or
// layout, aliasing, dims past 32 bits, streams and devices, and its environment variables.
#include <cstdint>
#include <limits>

#include <tessel/tessel.hpp>
#include <tessel/ops/matmul.hpp>

#include "harness.hpp"

namespace {
using namespace tessel;
using robustness::expect;

[[maybe_unused]] Tensor<float> dev(const Shape& s) { return zeros<float>(s); }  // (no case uses it under TSan)
constexpr std::int64_t past_32_bits = std::int64_t(1) << 31;
}  // namespace

// Under ThreadSanitizer none of these is built: each checks matmul's arguments on the calling
// thread, which TSan has nothing to add to (cases_ops.cu keeps the cases that cross threads).
#ifndef TESSEL_TEST_UNDER_TSAN

BAD("matmul", "inner dims that differ", Expect::invalid_argument, "shapes [3, 4] and [5, 6] cannot be multiplied") {
    (void)matmul(dev({3, 4}), dev({5, 6}));
};
BAD("matmul", "a vector of the wrong length", Expect::invalid_argument, "b's only dim (5)") { (void)matmul(dev({3, 4}), dev({5})); };
BAD("matmul", "batch dims that do not broadcast", Expect::invalid_argument, "do not broadcast: 2 and 3") {
    (void)matmul(dev({2, 3, 4}), dev({3, 4, 5}));
};
BAD("matmul", "a 0-d operand", Expect::invalid_argument, "at least one dim") { (void)matmul(dev({4}).select(0, 1), dev({4})); };
BAD("matmul", "an undefined operand", Expect::invalid_argument, "b is an undefined") { (void)matmul(dev({2, 2}), Tensor<float>{}); };
BAD("matmul", "a host operand", Expect::invalid_argument, "b is in host memory") {
    (void)matmul(dev({2, 2}), zeros<float>({2, 2}, {.space = MemorySpace::host}));
};
BAD("matmul", "an output of the wrong shape", Expect::invalid_argument, "out has shape [3, 5]") {
    matmul(dev({3, 4}), dev({4, 6}), dev({3, 5}));
};
BAD("matmul", "an output in host memory", Expect::invalid_argument, "out is in host memory") {
    matmul(dev({3, 4}), dev({4, 6}), zeros<float>({3, 6}, {.space = MemorySpace::host}));
};
BAD("matmul", "an output that is an operand", Expect::invalid_argument, "shares memory with b") {
    const auto x = dev({4, 4});
    matmul(dev({4, 4}), x, x);
};
BAD("matmul", "an output that overlaps an operand's storage", Expect::invalid_argument, "shares memory with a") {
    const auto x = dev({8, 4});
    matmul(x.narrow(0, 0, 4), dev({4, 4}), x.narrow(0, 2, 4));
};
DEFINED("matmul", "an output interleaved with an operand, sharing no element") {
    // x = [a | out]: out = a @ 2I, each row of out beside the row of a it is computed from.
    std::vector<float> v(5 * 8);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(k % 8 < 4 ? k : 0) + 0.25f;
    const auto x = from_host<float>(std::span<const float>(v), {5, 8});
    std::vector<float> diagonal(16, 0.f);
    for (std::size_t k = 0; k < 16; k += 5) diagonal[k] = 2.f;
    const auto two_i = from_host<float>(std::span<const float>(diagonal), {4, 4});
    matmul(x.narrow(1, 0, 4), two_i, x.narrow(1, 4, 4));
    auto want = v;
    for (std::size_t k = 0; k < v.size(); ++k)
        if (k % 8 >= 4) want[k] = v[k - 4] * 2;
    expect(x.to_vector() == want, "out = 2 a, a unchanged");
};
BAD("matmul", "a broadcast output", Expect::invalid_argument, "reaches some elements through more than one index") {
    matmul(dev({3, 4}), dev({4, 6}), dev({1, 6}).expand({3, 6}));
};
BAD("matmul", "beta without an output", Expect::invalid_argument, "beta = 0.5") {
    (void)matmul(dev({3, 4}), dev({4, 6}), MatmulOptions{.beta = 0.5});
};
BAD("matmul", "K past 32 bits", Expect::unsupported, "K 2147483648") {
    (void)matmul(dev({1, 1}).expand({1, past_32_bits}), dev({1, 1}).expand({past_32_bits, 1}));
};
BAD("matmul", "an invalid stream", Expect::cuda_error, "not a live stream") {
    (void)matmul(dev({2, 2}), dev({2, 2}), MatmulOptions{.stream = reinterpret_cast<rt::stream_t>(std::uintptr_t(0xdead0))});
};
BAD("matmul", "empty operands compute nothing and succeed", Expect::defined, "") {
    const auto c = matmul(dev({0, 3}), dev({3, 5}));
    expect(c.shape() == Shape{0, 5}, "shape [0, 5]");
    const auto z = matmul(full<float>({2, 0}, 1.f), full<float>({0, 3}, 1.f));
    expect(z.to_vector() == std::vector<float>(6, 0.f), "K = 0 gives zeros");
};
BAD_ENV("matmul", "operands on two devices", Expect::invalid_argument, "a is on device 0 and b on device 1", {{"TESSEL_SIM_DEVICES", "2"}}) {
    (void)matmul(zeros<float>({2, 2}, {.device = Device{0}}), zeros<float>({2, 2}, {.device = Device{1}}));
};
BAD_ENV("matmul", "a stream of another device", Expect::invalid_argument, "belongs to device 1", {{"TESSEL_SIM_DEVICES", "2"}}) {
    const Stream s = Stream::create({}, Device{1});
    (void)matmul(dev({2, 2}), dev({2, 2}), MatmulOptions{.stream = s.handle()});
};
BAD_ENV("matmul", "another device's default stream", Expect::invalid_argument, "belongs to device 1, the tensors are on device 0",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    (void)matmul(dev({2, 2}), dev({2, 2}), MatmulOptions{.stream = Stream::default_stream(Device{1})});
};
BAD_ENV("environment", "TESSEL_MATMUL_POLICY not a policy", Expect::invalid_argument, "TESSEL_MATMUL_POLICY='fast'",
        {{"TESSEL_MATMUL_POLICY", "fast"}}) {
    (void)matmul(dev({2, 2}), dev({2, 2}));
};
BAD_ENV("environment", "TESSEL_CUBLAS_WORKSPACE not a size", Expect::invalid_argument, "TESSEL_CUBLAS_WORKSPACE='lots'",
        {{"TESSEL_CUBLAS_WORKSPACE", "lots"}}) {
    (void)matmul(dev({2, 2}), dev({2, 2}), MatmulOptions{.policy = MatmulPolicy::library});
};
BAD_ENV("environment", "TESSEL_MATMUL_AUTOTUNE not 0 or 1", Expect::invalid_argument, "TESSEL_MATMUL_AUTOTUNE='yes'",
        {{"TESSEL_MATMUL_AUTOTUNE", "yes"}}) {
    (void)matmul(dev({2, 2}), dev({2, 2}));
};
BAD("matmul", "a bias of the wrong length", Expect::invalid_argument, "contiguous 1-d tensor of 6 elements") {
    matmul(dev({3, 4}), dev({4, 6}), dev({3, 6}), MatmulOptions{}, MatmulEpilogue<float>{.bias = dev({5})});
};
BAD("matmul", "a bias in host memory", Expect::invalid_argument, "the bias must be in device memory") {
    matmul(dev({3, 4}), dev({4, 6}), dev({3, 6}), MatmulOptions{}, MatmulEpilogue<float>{.bias = zeros<float>({6}, {.space = MemorySpace::host})});
};
BAD("matmul", "a residual of the wrong shape", Expect::invalid_argument, "the residual has shape [6, 3]") {
    matmul(dev({3, 4}), dev({4, 6}), dev({3, 6}), MatmulOptions{}, MatmulEpilogue<float>{.residual = dev({6, 3})});
};
BAD("matmul", "a 1-d linear weight with a 1-d bias", Expect::invalid_argument, "with a 1-d weight (one output feature) the bias must be 0-d") {
    (void)linear(dev({3, 4}), dev({4}), dev({1}));
};
BAD("matmul", "linear with beta", Expect::invalid_argument, "linear: beta = 1 scales an existing output, which linear does not take") {
    (void)linear(dev({3, 4}), dev({2, 4}), std::nullopt, Activation::none, MatmulOptions{.beta = 1});
};
BAD("matmul", "a linear weight that is 3-d", Expect::invalid_argument, "the weight must be a 2-d tensor") {
    (void)linear(dev({3, 4}), dev({1, 4, 4}));
};
// int8 and fp8 products: what the exact int32 output, the dequantisation scales and cuBLASLt refuse.
BAD("matmul", "an int32 output with a fused epilogue", Expect::invalid_argument, "int32 output is the exact int8 product") {
    matmul(zeros<std::int8_t>({3, 16}), zeros<std::int8_t>({4, 16}).transpose(0, 1), zeros<int>({3, 4}), MatmulOptions{},
           MatmulEpilogue<int>{.activation = Activation::relu});
};
BAD("matmul", "a fractional alpha into an int32 output", Expect::invalid_argument, "alpha = 0.5") {
    matmul(zeros<std::int8_t>({3, 16}), zeros<std::int8_t>({4, 16}).transpose(0, 1), zeros<int>({3, 4}), MatmulOptions{.alpha = 0.5});
};
BAD("matmul", "a column scale of the wrong length", Expect::invalid_argument, "column scale must be a contiguous 1-d fp32 tensor of 4") {
    matmul(zeros<std::int8_t>({3, 16}), zeros<std::int8_t>({4, 16}).transpose(0, 1), dev({3, 4}), MatmulOptions{},
           MatmulEpilogue<float>{.col_scale = dev({5})});
};
BAD("matmul", "a row scale in host memory", Expect::invalid_argument, "row scale must be in device memory") {
    matmul(zeros<std::int8_t>({3, 16}), zeros<std::int8_t>({4, 16}).transpose(0, 1), dev({3, 4}), MatmulOptions{},
           MatmulEpilogue<float>{.row_scale = zeros<float>({3}, {.space = MemorySpace::host})});
};
BAD("matmul", "dequantisation scales on an fp32 product", Expect::invalid_argument, "row and column scales dequantise an int8 or fp8") {
    matmul(dev({3, 4}), dev({4, 6}), dev({3, 6}), MatmulOptions{}, MatmulEpilogue<float>{.col_scale = dev({6})});
};
BAD("matmul", "an fp8 product on the hand-written path", Expect::unsupported, "run on cuBLASLt only") {
    (void)matmul(zeros<__nv_fp8_e4m3>({3, 16}), zeros<__nv_fp8_e4m3>({16, 16}).transpose(0, 1),
                 MatmulOptions{.policy = MatmulPolicy::handwritten});
};
BAD("matmul", "an fp8 product whose K cuBLASLt cannot take", Expect::unsupported, "multiples of 16") {
    (void)matmul(zeros<__nv_fp8_e4m3>({3, 24}), zeros<__nv_fp8_e4m3>({16, 24}).transpose(0, 1));
};
BAD("matmul", "an fp8 per-tensor scale of two elements", Expect::invalid_argument, "a_scale is a per-tensor scale") {
    (void)matmul(zeros<__nv_fp8_e4m3>({3, 16}), zeros<__nv_fp8_e4m3>({16, 16}).transpose(0, 1), MatmulOptions{},
                 MatmulEpilogue<float>{.a_scale = dev({2})});
};
BAD("matmul", "an output that holds its own column scale", Expect::invalid_argument, "shares memory with the column scale") {
    const auto out = dev({3, 5});  // the library path wrote products before the epilogue read the scale
    matmul(zeros<std::int8_t>({3, 4}), zeros<std::int8_t>({5, 4}).transpose(0, 1), out, MatmulOptions{},
           MatmulEpilogue<float>{.col_scale = out.select(0, 0)});
};
BAD("matmul", "an output that holds its own fp8 a_scale", Expect::invalid_argument, "shares memory with a_scale") {
    const auto out = dev({3, 16});
    matmul(zeros<__nv_fp8_e4m3>({3, 16}), zeros<__nv_fp8_e4m3>({16, 16}).transpose(0, 1), out, MatmulOptions{},
           MatmulEpilogue<float>{.a_scale = out.select(0, 0).narrow(0, 0, 1)});
};
DEFINED("matmul", "a NaN alpha on the library path gives NaN (no float-to-int conversion of it)") {
    const auto c = matmul(full<float>({2, 3}, 1.f), full<float>({3, 2}, 1.f),
                          MatmulOptions{.alpha = std::numeric_limits<double>::quiet_NaN(), .policy = MatmulPolicy::library});
    for (float v : c.to_vector()) expect(v != v, "NaN");
};
BAD("matmul", "an alpha past int32 into an int32 output", Expect::invalid_argument, "alpha = 3e+09") {
    matmul(zeros<std::int8_t>({3, 16}), zeros<std::int8_t>({4, 16}).transpose(0, 1), zeros<int>({3, 4}), MatmulOptions{.alpha = 3e9});
};
BAD("matmul", "a NaN beta into an int32 output", Expect::invalid_argument, "beta = nan") {
    matmul(zeros<std::int8_t>({3, 16}), zeros<std::int8_t>({4, 16}).transpose(0, 1), zeros<int>({3, 4}),
           MatmulOptions{.beta = std::numeric_limits<double>::quiet_NaN()});
};
BAD("matmul", "a linear weight in host memory", Expect::invalid_argument, "linear: the weight is in host memory") {
    (void)linear(dev({2, 3}), zeros<float>({4, 3}, {.space = MemorySpace::host}));
};
BAD("matmul", "a linear bias of the wrong length", Expect::invalid_argument, "linear: the bias must be a 1-d tensor of out_features (4)") {
    (void)linear(dev({2, 3}), dev({4, 3}), dev({1, 5}));
};
BAD_ENV("matmul", "a linear weight on another device", Expect::invalid_argument, "linear: the input is on device 0 and the weight on device 1",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    (void)linear(dev({2, 3}), zeros<float>({4, 3}, {.device = Device{1}}));
};
BAD_ENV("matmul", "a linear bias on another device", Expect::invalid_argument, "linear: the bias is on device 1 and the input on device 0",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    (void)linear(dev({2, 3}), dev({4, 3}), zeros<float>({4}, {.device = Device{1}}));
};
#endif  // TESSEL_TEST_UNDER_TSAN
