// Bad input to operations: expressions, reductions, row normalisations, sort/scan, random fills,
// loss scaling, quantisation, the pipeline; streams, devices, aliasing, integer overflow inside
// kernels, the allocator, and every TESSEL_* environment variable (in child processes).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>

#include <tessel/tessel.hpp>
#include <tessel/ops/sort.hpp>

#include "../support/gate.hpp"
#include "../support/random_tensor.hpp"
#include "harness.hpp"

namespace {
using namespace tessel;
using robustness::expect;
using I32 = std::int32_t;
using I64 = std::int64_t;

Tensor<float> dev(const Shape& s) { return zeros<float>(s); }
Tensor<float> host(const Shape& s) { return zeros<float>(s, {.space = MemorySpace::host}); }
using tessel::testing::Gate;  // a kernel holding a stream until the host opens the gate
void synchronize_device(Device d) {
    DeviceGuard g(d);
    rt::device_synchronize();
}
#if defined(TESSEL_BACKEND_SIM)  // a made-up or destroyed stream handle: CUDA does not check handles (undefined there)
rt::stream_t bogus_stream() { return reinterpret_cast<rt::stream_t>(std::uintptr_t(0xdead0)); }
// A stream that existed and was destroyed (handles are not reused while it is not recreated).
rt::stream_t destroyed_stream() {
    rt::stream_t s = rt::stream_create(true);
    rt::stream_destroy(s);
    return s;
}
#endif
}  // namespace

// Under ThreadSanitizer only the cases from "streams" on are built: the ones up to here check an
// operation's arguments on the calling thread (and run a kernel on a few elements at most), which
// TSan has nothing to add to; streams, devices, the allocator and the pipeline cross threads.
#ifndef TESSEL_TEST_UNDER_TSAN
// ---- expressions ----------------------------------------------------------------------------------
BAD("expressions", "operands that do not broadcast", Expect::invalid_argument, "operator +: shapes [3] and [4]") {
    (void)evaluate(dev({3}) + dev({4}));
};
BAD("expressions", "an expression that does not fit the output", Expect::invalid_argument, "does not broadcast to the output") {
    (dev({3}) = dev({2, 3}) * 2).run();
};
BAD("expressions", "a host operand", Expect::invalid_argument, "host") { (void)evaluate(dev({3}) + host({3})); };
BAD("expressions", "where with two numbers beyond int64", Expect::invalid_argument, "does not fit int64") {
    (void)evaluate(where(dev({3}) > 0, 0, ~0ull));
};
BAD("expressions", "maximum of uint8 with a number above its range", Expect::invalid_argument, "maximum: the number 300") {
    (void)evaluate(maximum(zeros<std::uint8_t>({3}), 300));
};
BAD("expressions", "minimum of int8 with a number below its range", Expect::invalid_argument, "minimum: the number -200") {
    (void)evaluate(minimum(zeros<std::int8_t>({3}), -200));
};
BAD("expressions", "a bool mask compared with a number beyond int64", Expect::invalid_argument, "beyond int64") {
    (void)evaluate(zeros<bool>({3}) < ~0ull);
};
BAD("reductions", "var with a NaN correction", Expect::invalid_argument, "correction nan must be finite") {
    (void)var(dev({4}), {}, std::nan(""));
};
BAD("expressions", "clamp of uint8 above 255", Expect::invalid_argument, "lower bound 300 is above every value of uint8") {
    (void)evaluate(clamp(zeros<std::uint8_t>({3}), 300, 400));
};
BAD("expressions", "where with an int8 tensor and 300", Expect::invalid_argument, "value 300 does not fit the result's type int8") {
    (void)evaluate(where(zeros<bool>({3}), zeros<std::int8_t>({3}), 300));
};
BAD("expressions", "an int64 tensor compared with 2^64 - 1", Expect::invalid_argument, "comparison: the number 18446744073709551615 is beyond int64") {
    (void)evaluate(zeros<std::int64_t>({3}) < std::numeric_limits<unsigned long long>::max());
};
DEFINED("expressions", "clamp of uint8 to [-5, 10] clamps to [0, 10]") {
    const auto v = evaluate(clamp(from_host<std::uint8_t>({0, 5, 200}, {3}), -5, 10)).to_vector();
    expect(v == std::vector<std::uint8_t>{0, 5, 10}, "clamp(u8, -5, 10)");
};
BAD("expressions", "a host output", Expect::invalid_argument, "expressions run on a device") { (host({3}) = dev({3}) + 1).run(); };
BAD("expressions", "an undefined output", Expect::invalid_argument, "undefined") { (Tensor<float>{} = dev({3}) + 1).run(); };
BAD("expressions", "an undefined operand", Expect::invalid_argument, "undefined") { (void)evaluate(dev({3}) + Tensor<float>{}); };
BAD("expressions", "a broadcast output", Expect::invalid_argument, "repeats elements") {
    (dev({1, 3}).expand({4, 3}) = dev({4, 3}) + 1).run();
};
BAD("expressions", "an overlapping output", Expect::invalid_argument, "an overlapping view") {
    const auto base = zeros<float>({8});  // a 3 x 3 view with strides (1, 1): element [0, 1] is element [1, 0]
    (from_blob<float>(base.data(), {3, 3}, MemorySpace::device, Device{0}, {}, Shape{1, 1}) = arange<float>(0, 9).view({3, 3}) + 0).run();
};
BAD("expressions", "Tensor<float> d = host + 1", Expect::invalid_argument, "host") { Tensor<float> d = host({3}) + 1.f; };
#if defined(TESSEL_BACKEND_SIM)
BAD("expressions", "an invalid stream", Expect::cuda_error, "not a live stream") { (dev({3}) = dev({3}) + 1).run(bogus_stream()); };
BAD("expressions", "a destroyed stream", Expect::cuda_error, "not a live stream") {
    (dev({3}) = dev({3}) + 1).run(destroyed_stream());
};
#endif
DEFINED("expressions", "Tensor<float> d = a + b evaluates") {
    const auto a = full<float>({5}, 2.f), b = full<float>({5}, 3.f);
    Tensor<float> d = a + b;
    expect(d.to_vector() == std::vector<float>(5, 5.f), "2 + 3");
};
DEFINED("expressions", "lazy operands are read when evaluated") {
    auto a = full<float>({3}, 1.f);
    const auto e = a + 1.f;
    (a = full<float>({3}, 10.f) * 1.f).run();  // writes into a's memory, which e reads
    expect(evaluate(e).to_vector() == std::vector<float>(3, 11.f), "e sees the new values");
};

DEFINED("expressions", "an integer tensor over an integer number beyond its type divides by the number (torch's true division)") {
    const auto i8 = from_host<std::int8_t>({-128, -1, 0, 64, 127}, {5});
    const auto u8 = from_host<std::uint8_t>({0, 1, 128, 255}, {4});
    const auto i32 = from_host<std::int32_t>({-7, 1, 2147483647}, {3});
    expect(evaluate(i8 / 128).to_vector() == std::vector<float>{-1.f, -1.f / 128, 0.f, 0.5f, 127.f / 128}, "x_i8 / 128");
    expect(evaluate(u8 / 256).to_vector() == std::vector<float>{0.f, 1.f / 256, 0.5f, 255.f / 256}, "x_u8 / 256");
    expect(evaluate(256 / u8.slice(0, 1, 4)).to_vector() == std::vector<float>{256.f, 2.f, 256.f / 255}, "256 / x_u8");
    const auto q = evaluate(i32 / 3000000000LL).to_vector();
    const double want[] = {-7.0 / 3e9, 1.0 / 3e9, 2147483647.0 / 3e9};  // computed in float: within a few float roundings
    for (std::size_t k = 0; k < 3; ++k) expect(q.size() == 3 && std::fabs(q[k] - want[k]) <= 1e-6 * std::fabs(want[k]), "x_i32 / 3e9");
};
DEFINED("quantize", "per-channel parameters of a 1-d tensor are one channel per element") {
    const auto x = from_host<float>({-2.54f, 1.27f, 0.f, 12.7f}, {4});
    const auto p = choose_channel_qparams(x, 0);
    const auto scale = p.scale.to_vector();
    const std::vector<double> want{2.54 / 127, 1.27 / 127, 1.0, 12.7 / 127};  // a channel of zeros gets 1
    for (std::size_t k = 0; k < 4; ++k)
        expect(scale.size() == 4 && std::fabs(scale[k] - want[k]) <= 1e-6 * want[k], "each element's own scale (one global scale before)");
};
// ---- aliasing ------------------------------------------------------------------------------------
BAD("aliasing", "an output shifted over its input", Expect::invalid_argument, "overlaps the output") {
    const auto t = dev({10});
    (t.slice(0, 1, 10) = t.slice(0, 0, 9) + 1).run();
};
BAD("aliasing", "an output aliasing an input through another storage", Expect::invalid_argument, "overlaps the output") {
    const auto t = dev({10});
    const auto alias = from_blob<float>(t.data() + 1, {9}, MemorySpace::device, t.device());
    (t.slice(0, 0, 9) = alias * 2).run();
};
BAD("aliasing", "a transposed alias of the output", Expect::invalid_argument, "overlaps the output") {
    const auto t = dev({4, 4});
    (t = t.transpose(0, 1) + 1).run();
};
DEFINED("aliasing", "odd columns written from even ones of the same rows (interleaved, sharing no element)") {
    std::vector<float> v(4 * 9);
    for (std::size_t k = 0; k < v.size(); ++k) v[k] = float(k) + 0.5f;
    const auto t = from_host<float>(std::span<const float>(v), {4, 9});
    (t.slice(1, 1, 9, 2) = t.slice(1, 0, 8, 2) * 2).run();
    auto want = v;
    for (std::size_t k = 0; k < v.size(); ++k)
        if (k % 9 % 2 == 1) want[k] = v[k - 1] * 2;
    expect(t.to_vector() == want, "each odd column twice the even column before it");
};
BAD("aliasing", "elements 0, 2, 4 written from 1, 4, 7", Expect::invalid_argument, "overlaps the output") {
    const auto t = dev({9});
    (t.slice(0, 0, 6, 2) = t.slice(0, 1, 9, 3) + 1).run();
};
DEFINED("aliasing", "in place through another storage is allowed") {
    const auto t = full<float>({6}, 1.f);
    const auto alias = from_blob<float>(t.data(), {6}, MemorySpace::device, t.device());
    (t = alias * 3).run();
    expect(t.to_vector() == std::vector<float>(6, 3.f), "t = t * 3");
};
DEFINED("aliasing", "a += a") {
    const auto t = full<float>({4}, 2.f);
    (t += t).run();
    expect(t.to_vector() == std::vector<float>(4, 4.f), "2 + 2");
};

// ---- integer overflow in kernels wraps as on a GPU --------------------------------------------------
DEFINED("kernels", "int32 addition wraps") {
    const auto a = full<I32>({7}, std::numeric_limits<I32>::max());
    const auto v = evaluate(a + 1).to_vector();
    expect(v[6] == std::numeric_limits<I32>::min(), "max + 1 == min");
};
DEFINED("kernels", "int64 multiplication wraps") {
    const auto a = full<I64>({3}, I64(1) << 62);
    const auto v = evaluate(a * 4).to_vector();
    expect(v[0] == 0, "2^62 * 4 wraps to 0");
};
DEFINED("kernels", "int32 subtraction wraps") {
    const auto v = evaluate(full<I32>({2}, std::numeric_limits<I32>::min()) - 1).to_vector();
    expect(v[1] == std::numeric_limits<I32>::max(), "min - 1 == max");
};
DEFINED("kernels", "negating INT_MIN wraps") {
    const auto v = evaluate(-full<I32>({2}, std::numeric_limits<I32>::min())).to_vector();
    expect(v[0] == std::numeric_limits<I32>::min(), "-min == min");
};
DEFINED("kernels", "int64 sum wraps") {
    const auto v = sum(full<I64>({1000}, std::numeric_limits<I64>::max() / 100)).item();
    const auto want = I64(std::uint64_t(std::numeric_limits<I64>::max() / 100) * 1000u);
    expect(v == want, "wrapped sum " + std::to_string(v));
};
DEFINED("kernels", "int64 product wraps") {
    const auto v = prod(full<I64>({70}, 3)).item();
    std::uint64_t want = 1;
    for (int i = 0; i < 70; ++i) want *= 3u;
    expect(v == I64(want), "3^70 mod 2^64");
};
DEFINED("kernels", "int64 cumsum wraps") {
    const auto v = cumsum(full<I64>({4}, std::numeric_limits<I64>::max() / 2)).to_vector();
    expect(v[3] == I64(std::uint64_t(std::numeric_limits<I64>::max() / 2) * 4u), "wrapped cumsum");
};
DEFINED("kernels", "integer modulo by 0 and -1") {
    const auto v = evaluate(full<I32>({2}, std::numeric_limits<I32>::min()) % from_host<I32>({0, -1}, {2})).to_vector();
    expect(v == std::vector<I32>{0, 0}, "x % 0 == 0 and INT_MIN % -1 == 0");
};

// ---- reductions -----------------------------------------------------------------------------------
BAD("reductions", "axis out of range", Expect::invalid_argument, "axis") { (void)sum(dev({3, 4}), {2}); };
BAD("reductions", "negative axis out of range", Expect::invalid_argument, "axis") { (void)amax(dev({3, 4}), {-3}); };
BAD("reductions", "an axis twice", Expect::invalid_argument, "axis -1 given twice") { (void)sum(dev({3, 4}), {1, -1}); };
BAD("reductions", "an undefined tensor", Expect::invalid_argument, "undefined") { (void)sum(Tensor<float>{}); };
BAD("reductions", "a host tensor", Expect::invalid_argument, "host") { (void)mean(host({4})); };
#if defined(TESSEL_BACKEND_SIM)
BAD("reductions", "an invalid stream", Expect::cuda_error, "not a live stream") { (void)sum(dev({4}), {}, false, bogus_stream()); };
#endif
BAD("reductions", "argmax of no elements", Expect::invalid_argument, "argmax") { (void)argmax(dev({0})); };
BAD("reductions", "amax over an empty dim of an empty tensor", Expect::invalid_argument, "amax: the reduced dims of shape [0, 0] are empty") {
    (void)amax(dev({0, 0}), {1});
};
BAD("reductions", "argmin of an expression over an empty dim", Expect::invalid_argument, "argmin: the reduced dims of shape [0, 0] are empty") {
    (void)argmin(dev({0, 0}) * 2.f, {0});
};
BAD("reductions", "the inf-norm of no elements", Expect::invalid_argument, "norm: the reduced dims of shape [0] are empty") {
    (void)norm(dev({0}), ops::NormOrder::inf);
};
DEFINED("reductions", "the l2-norm of no elements is 0") { expect(norm(dev({0})).item() == 0.f, "norm([]) is 0"); };
BAD("reductions", "var with a negative correction", Expect::invalid_argument, "correction") { (void)var(dev({4}), {}, -1); };
// The output's block is poisoned with finite bytes, so a NaN that is not written does not pass.
static void leave_finite_block() { testing::poison_next<float>({}, 0x5A); }
DEFINED("reductions", "mean of no elements is NaN") {
    leave_finite_block();
    expect(std::isnan(mean(dev({0})).item()), "mean([]) is NaN");
};
DEFINED("reductions", "sum of no elements is 0") { expect(sum(dev({0, 3}), {0}).to_vector() == std::vector<float>(3, 0.f), "zeros"); };
DEFINED("reductions", "var of one element is NaN") {
    const auto x = dev({1});
    leave_finite_block();
    expect(std::isnan(var(x).item()), "unbiased var of 1 element");
};

// ---- rows ---------------------------------------------------------------------------------------
BAD("rows", "softmax axis out of range", Expect::invalid_argument, "softmax: axis 2 out of range") { (void)softmax(dev({3, 4}), 2); };
DEFINED("rows", "softmax of a scalar is 1 (torch's)") { expect(softmax(full<float>({}, 3.f)).item() == 1.f, "softmax(3) = 1"); };
BAD("rows", "softmax of a scalar along axis 1", Expect::invalid_argument, "out of range for a 0-d tensor") {
    (void)softmax(dev({}), 1);
};
BAD("rows", "softmax of a host tensor", Expect::invalid_argument, "softmax: the input (float32 [3]) is in host memory") { (void)softmax(host({3})); };
BAD("rows", "log_softmax of an undefined tensor", Expect::invalid_argument, "undefined") { (void)log_softmax(Tensor<float>{}); };
BAD("rows", "layer_norm weight of the wrong size", Expect::invalid_argument, "weight") {
    (void)layer_norm(dev({3, 4}), dev({5}));
};
BAD("rows", "layer_norm bias on the host", Expect::invalid_argument, "layer_norm: bias is in host memory; it must be in device memory on the input's device 0") { (void)layer_norm(dev({3, 4}), dev({4}), host({4})); };
BAD_ENV("rows", "rms_norm weight on another device", Expect::invalid_argument, "rms_norm: weight is on device 1 and the input on device 0",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    (void)rms_norm(zeros<float>({3, 4}, {.device = Device{0}}), zeros<float>({4}, {.device = Device{1}}));
};
BAD("rows", "rms_norm of a scalar", Expect::invalid_argument, "rms_norm") { (void)rms_norm(dev({})); };
BAD("rows", "layer_norm with a negative eps", Expect::invalid_argument, "eps") { (void)layer_norm(dev({3, 4}), {}, {}, -1.0); };
#if defined(TESSEL_BACKEND_SIM)
BAD("rows", "softmax on an invalid stream", Expect::cuda_error, "not a live stream") { (void)softmax(dev({2, 3}), -1, bogus_stream()); };
#endif

// ---- sort and scan ----------------------------------------------------------------------------------
BAD("sort", "sort axis out of range", Expect::invalid_argument, "axis") { (void)sort(dev({3, 4}), 5); };
BAD("sort", "sort of a host tensor", Expect::invalid_argument, "device") { (void)sort(host({4})); };
BAD("sort", "argsort of an undefined tensor", Expect::invalid_argument, "device") { (void)argsort(Tensor<float>{}); };
BAD("sort", "cumsum axis out of range", Expect::invalid_argument, "cumsum: axis -3 out of range for shape [3, 4]") { (void)cumsum(dev({3, 4}), -3); };
BAD("sort", "argsort along axis 2 of a 2-d tensor", Expect::invalid_argument, "argsort: axis 2 out of range for shape [3, 4]") { (void)argsort(dev({3, 4}), 2); };
BAD("sort", "sort of a scalar along axis 1", Expect::invalid_argument, "axis 1") { (void)sort(dev({}), 1); };
BAD("sort", "cumsum of a scalar along axis -2", Expect::invalid_argument, "axis -2") { (void)cumsum(dev({}), -2); };
DEFINED("sort", "cumsum of a scalar along axis -1") {
    expect(cumsum(full<float>({}, 3.f), -1).item() == 3.f, "a scalar's running sum is itself");
};
BAD("sort", "cumprod of a host tensor", Expect::invalid_argument, "device") { (void)cumprod(host({4})); };
BAD("sort", "unique of a host tensor", Expect::invalid_argument, "device") { (void)unique(host({4})); };
DEFINED("sort", "sort of one element") { expect(sort(full<float>({1}, 2.f)).values.item() == 2.f, "one element sorts to itself"); };

// ---- random -------------------------------------------------------------------------------------
BAD("random", "uniform with lo > hi", Expect::invalid_argument, "lo <= hi") { uniform_fill(dev({4}), 1, 0, 2.0, 1.0); };
BAD("random", "uniform with a NaN bound", Expect::invalid_argument, "finite") { uniform_fill(dev({4}), 1, 0, std::nan(""), 1.0); };
BAD("random", "uniform to infinity", Expect::invalid_argument, "finite") {
    uniform_fill(dev({4}), 1, 0, 0.0, std::numeric_limits<double>::infinity());
};
BAD("random", "uniform over a range wider than float", Expect::invalid_argument, "at most") {
    uniform_fill(dev({4}), 1, 0, -3e38, 3e38);
};
BAD("random", "a fill past the end of the stream", Expect::invalid_argument, "pass the end of the stream") {
    uniform_fill(dev({4}), 1, std::numeric_limits<std::uint64_t>::max() - 1);
};
BAD("random", "a Philox draw past the end of the stream", Expect::invalid_argument, "passes the end of the stream") {
    (void)Philox(1, std::numeric_limits<std::uint64_t>::max() - 2).uniform<float>({4});
};
BAD("random", "normal with a negative stddev", Expect::invalid_argument, "stddev") { normal_fill(dev({4}), 1, 0, 0.0, -1.0); };
BAD("random", "normal with a NaN mean", Expect::invalid_argument, "finite") { normal_fill(dev({4}), 1, 0, std::nan(""), 1.0); };
BAD("random", "a fill of host memory", Expect::invalid_argument, "host memory") { uniform_fill(host({4}), 1); };
BAD("random", "a fill of a broadcast view", Expect::invalid_argument, "more than one index") {
    uniform_fill(dev({4, 1}).expand({4, 4}), 1);
};
DEFINED("random", "a fill of a transposed view is the fill of its shape, in its order") {
    const auto t = dev({3, 5}), dense = dev({5, 3});
    uniform_fill(t.transpose(0, 1), 8);
    uniform_fill(dense, 8);
    expect(t.to_vector() == dense.transpose(0, 1).contiguous().to_vector(), "the transposed fill");
};
BAD("random", "a fill of an undefined tensor", Expect::invalid_argument, "undefined") { uniform_fill(Tensor<float>{}, 1); };
BAD("random", "Philox uniform with lo > hi", Expect::invalid_argument, "lo <= hi") { (void)Philox(1).uniform<float>({4}, 1.0, 0.0); };
DEFINED("random", "uniform with lo == hi is constant") {
    const auto t = dev({9});
    uniform_fill(t, 3, 0, 2.5, 2.5);
    expect(t.to_vector() == std::vector<float>(9, 2.5f), "all 2.5");
};

// ---- mixed precision ----------------------------------------------------------------------------------
BAD("amp", "unscale_and_check without a flag", Expect::invalid_argument, "found_nonfinite is a null pointer") {
    const std::vector<Tensor<float>> g{dev({4})};
    unscale_and_check<float>(g, 0.5f, nullptr, current_stream().handle());
};
BAD("amp", "unscale a strided gradient", Expect::invalid_argument, "contiguous device tensor") {
    DynamicLossScaler s;
    s.unscale({dev({4, 4}).transpose(0, 1)});
};
BAD("amp", "unscale a host gradient", Expect::invalid_argument, "contiguous device tensor") {
    DynamicLossScaler s;
    s.unscale({host({4})});
};
BAD("amp", "unscale_and_check of an undefined tensor", Expect::invalid_argument, "tensor 1 must be a contiguous device tensor") {
    // (DynamicLossScaler::unscale skips undefined gradients, as torch skips None; the list call takes tensors only.)
    const std::vector<Tensor<float>> g{dev({4}), Tensor<float>{}};
    unsigned* flag = static_cast<unsigned*>(memory::allocate(sizeof(unsigned)));
    try {
        unscale_and_check<float>(g, 0.5f, flag, nullptr);
    } catch (...) {
        memory::deallocate(flag);
        throw;
    }
};
BAD("amp", "a growth factor of 1", Expect::invalid_argument, "growth_factor > 1") {
    DynamicLossScaler s({.growth_factor = 1.0});
};
BAD("amp", "a backoff factor of 1", Expect::invalid_argument, "backoff_factor") { DynamicLossScaler s({.backoff_factor = 1.0}); };
BAD("amp", "a zero initial scale", Expect::invalid_argument, "init_scale > 0") { DynamicLossScaler s({.init_scale = 0}); };
BAD("amp", "a gradient listed twice", Expect::invalid_argument, "tensors 0 and 2 share memory") {
    DynamicLossScaler s;
    const auto g = dev({4});
    s.unscale({g, dev({3}), g});  // it was divided by the scale twice
};
BAD("amp", "an infinite initial scale", Expect::invalid_argument, "at most FLT_MAX") {
    DynamicLossScaler s({.init_scale = std::numeric_limits<double>::infinity()});  // 1/scale would zero every gradient
};
BAD("amp", "an infinite growth factor", Expect::invalid_argument, "growth_factor inf") {
    DynamicLossScaler s({.growth_factor = std::numeric_limits<double>::infinity()});
};
DEFINED("amp", "the scale grows no further than a finite float") {
    DynamicLossScaler s({.init_scale = 1e38, .growth_factor = 2.0, .growth_interval = 1});
    const std::vector<Tensor<float>> none;  // a step without gradients is still a step that was checked
    s.unscale(none);
    s.update();  // 2e38 is still a float
    expect(s.scale() == 2e38, "2e38");
    s.unscale(none);
    s.update();  // 4e38 is not: the scale stays, as GradScaler's does
    expect(s.scale() == 2e38 && s.clean_steps() == 0, "kept at 2e38");
};
BAD_ENV("devices", "unscale_and_check with another device's stream", Expect::invalid_argument, "belongs to device 1",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    const std::vector<Tensor<float>> g{zeros<float>({4}, {.device = Device{0}})};
    const Stream s = Stream::create({}, Device{1});
    unsigned* flag = static_cast<unsigned*>(memory::allocate(sizeof(unsigned)));
    try {
        unscale_and_check<float>(g, 0.5f, flag, s);
    } catch (...) {
        expect(g[0].to_vector() == std::vector<float>(4, 0.f), "the gradient is still usable");  // it was poisoned by a failed note_write
        memory::deallocate(flag);
        throw;
    }
};
BAD("amp", "update() with no unscale since the last", Expect::invalid_argument, "no gradients were unscaled since the last update()") {
    DynamicLossScaler s;
    s.unscale({dev({4})});
    s.update();
    s.update();  // torch: "No inf checks were recorded prior to update"
};
BAD("amp", "a gradient unscaled twice in one step", Expect::invalid_argument, "gradient 1 was already unscaled since the last update()") {
    DynamicLossScaler s({.init_scale = 4.0});
    const auto h = full<float>({2}, 8.f);
    s.unscale({h});
    try {
        s.unscale({Tensor<float>{}, h});  // h would be divided by 4 twice
    } catch (...) {
        expect(h.to_vector() == std::vector<float>(2, 2.f), "h unscaled once");
        throw;
    }
};
DEFINED("amp", "undefined gradients are skipped, as torch skips None") {
    DynamicLossScaler s({.init_scale = 4.0});
    const auto g = full<float>({3}, 8.f);
    s.unscale({Tensor<float>{}, g, Tensor<float>{}});
    s.update();
    expect(g.to_vector() == std::vector<float>(3, 2.f) && s.clean_steps() == 1, "g unscaled, a clean step");
    const auto h = full<float>({3}, 8.f);  // the next step unscales anew
    s.unscale({g});
    s.unscale({h});
    expect(g.to_vector() == std::vector<float>(3, 0.5f) && h.to_vector() == std::vector<float>(3, 2.f), "each once in step two");
};
BAD("amp", "scale of an undefined loss", Expect::invalid_argument, "undefined") {
    DynamicLossScaler s;
    (void)s.scale(Tensor<float>{});
};
DEFINED("amp", "scale(loss), unscale of two dtypes in one call, update") {
    DynamicLossScaler s({.init_scale = 8.0});
    const auto loss = full<float>({}, 0.5f);
    expect(s.scale(loss).item() == 4.f, "0.5 * 8");
    const std::vector<Tensor<float>> f32{full<float>({5}, 16.f)};
    const auto f16 = full<__half>({3}, __float2half(8.f));
    s.unscale_all(std::nullopt, f32, f16);
    expect(f32[0].to_vector() == std::vector<float>(5, 2.f) && __half2float(f16.to_vector()[0]) == 1.f && !s.found_nonfinite(),
           "both groups unscaled by 1/8");
    s.update();
    expect(s.scale() == 8.0 && s.clean_steps() == 1, "one clean step");
};

// ---- quantisation -----------------------------------------------------------------------------------
BAD("quantize", "a zero scale", Expect::invalid_argument, "scale must be positive") { (void)quantize(dev({4}), QuantParams{0.0, 0}); };
BAD("quantize", "a zero point outside int8", Expect::invalid_argument, "outside int8") {
    (void)quantize(dev({4}), QuantParams{1.0, 200});
};
BAD("quantize", "per-channel axis out of range", Expect::invalid_argument, "axis 2 out of range") {
    (void)choose_channel_qparams(dev({3, 4}), 2);
};
BAD("quantize", "per-channel scale of the wrong size", Expect::invalid_argument, "scale must have shape [4]") {
    ChannelQuantParams p{full<float>({3}, 1.f), zeros<I32>({3}), 1};
    (void)quantize(dev({3, 4}), p);
};
BAD("quantize", "a NaN scale", Expect::invalid_argument, "scale must be positive") {
    (void)quantize(dev({4}), QuantParams{std::nan(""), 0});
};
BAD("quantize", "a scale that is 0 as a float", Expect::invalid_argument, "scale must be positive and finite as a float") {
    (void)quantize(dev({4}), QuantParams{1e-50, 0});
};
BAD("quantize", "an infinite scale", Expect::invalid_argument, "scale must be positive and finite") {
    (void)quantize(dev({4}), QuantParams{std::numeric_limits<double>::infinity(), 0});
};
DEFINED("quantize", "parameters chosen for subnormal values are accepted") {
    const auto x = full<float>({2, 3}, 1e-40f);  // max / 127 underflows float: the scale is float's smallest normal
    const QuantParams p = choose_qparams(x);
    expect(float(p.scale) == std::numeric_limits<float>::min(), "per-tensor scale");
    (void)quantize(x, p);
    (void)quantize(x, choose_channel_qparams(x, 0));
};
BAD("quantize", "a zero scale in one channel", Expect::invalid_argument, "channel 1 has scale 0; scales must be positive") {
    (void)quantize(dev({3, 4}), ChannelQuantParams{from_host<float>({1.f, 0.f, 2.f}, {3}), zeros<I32>({3}), 0});
};
BAD("quantize", "a negative scale in one channel", Expect::invalid_argument, "channel 2 has scale -1") {
    (void)quantize(dev({3, 4}), ChannelQuantParams{from_host<float>({1.f, 1.f, -1.f}, {3}), zeros<I32>({3}), 0});
};
BAD("quantize", "choose_qparams of a tensor holding NaN", Expect::invalid_argument, "choose_qparams: x holds NaN") {
    (void)choose_qparams(from_host<float>({1000.f, std::numeric_limits<float>::quiet_NaN(), -3.f}, {3}));  // was scale 1
};
BAD("quantize", "asymmetric choose_qparams of a tensor holding -inf", Expect::invalid_argument, "x holds an infinity") {
    (void)choose_qparams(from_host<float>({-std::numeric_limits<float>::infinity(), 1.f}, {2}), false);  // was UB
};
BAD("quantize", "choose_qparams of an undefined tensor", Expect::invalid_argument,
    "choose_qparams: x is an undefined (default-constructed) tensor") {
    (void)choose_qparams(Tensor<float>{});  // the error named amin
};
BAD("quantize", "per-channel parameters of an undefined tensor", Expect::invalid_argument,
    "choose_channel_qparams: x is an undefined (default-constructed) tensor") {
    (void)choose_channel_qparams(Tensor<float>{}, 0);  // said "axis 0 out of range for rank 0"
};
BAD("quantize", "per-channel quantize with undefined parameters", Expect::invalid_argument,
    "scale must have shape [3], not (undefined)") {
    (void)quantize(dev({3, 4}), ChannelQuantParams{});  // said "not []"
};
BAD("quantize", "choose_qparams of an empty tensor", Expect::invalid_argument, "choose_qparams: x (shape [0, 3]) is empty") {
    (void)choose_qparams(zeros<float>({0, 3}));  // the error named amin
};
BAD("quantize", "per-channel parameters of channels with no elements", Expect::invalid_argument,
    "choose_channel_qparams: x (shape [3, 0]) has 3 channels along axis 0 but no elements") {
    (void)choose_channel_qparams(zeros<float>({3, 0}), 0);
};
DEFINED("quantize", "per-channel parameters of zero channels are empty") {
    const auto p = choose_channel_qparams(zeros<float>({0, 4}), 0);
    expect(p.scale.numel() == 0 && p.zero_point.numel() == 0, "empty parameters");
};
BAD("quantize", "per-channel parameters of a channel holding NaN", Expect::invalid_argument, "channel 0 has scale nan") {
    const auto x = from_host<float>({1000.f, std::numeric_limits<float>::quiet_NaN(), 500.f, 2.f}, {2, 2});
    (void)quantize(x, choose_channel_qparams(x, 0));  // the NaN channel's scale was 1
};
BAD("quantize", "dequantize with a NaN scale", Expect::invalid_argument, "dequantize: scale must be positive") {
    (void)dequantize(zeros<std::int8_t>({4}), QuantParams{std::numeric_limits<double>::quiet_NaN(), 0});
};
BAD("quantize", "dequantize with a zero point outside int8", Expect::invalid_argument, "dequantize: zero point 1000") {
    (void)dequantize(zeros<std::int8_t>({4}), QuantParams{1.0, 1000});
};
BAD("quantize", "a channel's zero point outside int8", Expect::invalid_argument, "channel 0 has zero point 1000, outside int8") {
    (void)quantize(dev({3, 4}), ChannelQuantParams{full<float>({3}, 1.f), from_host<I32>({1000, 0, 0}, {3}), 0});
};
#endif  // TESSEL_TEST_UNDER_TSAN

// ---- streams ------------------------------------------------------------------------------------
#if defined(TESSEL_BACKEND_SIM)
BAD("streams", "cudaStreamPerThread to an operation", Expect::invalid_argument, "cudaStreamPerThread names a different stream") {
    (void)dev({3}).clone(cudaStreamPerThread);
};
BAD("streams", "cudaStreamPerThread to memory::allocate", Expect::invalid_argument, "cudaStreamPerThread names a different stream") {
    memory::deallocate(memory::allocate(64, cudaStreamPerThread));
};
BAD("streams", "record_stream with a bogus stream", Expect::cuda_error, "not a live stream") {
    const auto t = dev({4});
    memory::record_stream(t.data(), bogus_stream());
};
#endif
BAD("streams", "StreamGuard with a device that does not exist", Expect::invalid_argument, "device -1 does not exist") {
    StreamGuard g(Stream::default_stream(Device{-1}));  // the per-device list used to grow without end
};
DEFINED("streams", "elapsed_ms of an event against itself is 0 (CUDA's answer)") {
    Event e(true);
    e.record(current_stream());
    e.synchronize();
    expect(e.elapsed_ms(e) == 0.0f, "0 ms");
};
BAD("streams", "record_stream on device 5", Expect::invalid_argument, "device 5 does not exist") {
    const auto t = dev({4});
    memory::record_stream(t.data(), nullptr, Device{5});
};
BAD("streams", "record_stream of memory tessel does not own", Expect::invalid_argument, "not the start of a live allocation") {
    const auto t = dev({4});
    memory::record_stream(t.data() + 1, nullptr);
};
#if defined(TESSEL_BACKEND_SIM)
BAD("streams", "memory::allocate on a bogus stream", Expect::cuda_error, "not a live stream") {
    void* p = memory::allocate(64, bogus_stream());
    memory::deallocate(p);  // not reached: nothing may be allocated
};
BAD("streams", "memory::allocate on a destroyed stream", Expect::cuda_error, "not a live stream") {
    void* p = memory::allocate(64, destroyed_stream());
    memory::deallocate(p);
};
BAD("streams", "clone on a destroyed stream", Expect::cuda_error, "not a live stream") { (void)dev({4}).clone(destroyed_stream()); };
BAD("streams", "zeros on a bogus stream", Expect::cuda_error, "not a live stream") {
    (void)zeros<float>({4}, {.stream = bogus_stream()});
};
BAD("streams", "a launch on a bogus stream", Expect::cuda_error, "not a live stream") { uniform_fill(dev({4}), 1, 0, 0.0, 1.0, bogus_stream()); };
#endif
DEFINED("streams", "every op takes a tessel::Stream") {
    const Stream s = Stream::create();
    const auto x = Philox(7).uniform<float>({8, 16}, -1.0, 1.0, {.stream = s.handle()});
    const auto y = softmax(x, -1, s);
    const auto total = sum(y, {}, false, s);
    const auto sorted = sort(x, -1, false, s);
    const auto c = cumsum(x, -1, s);
    const auto z = x.transpose(0, 1).contiguous(s);
    Tensor<float> w = evaluate(x * 2, s);
    (w = w + 1).run(s);
    uniform_fill(w, 1, 0, 0.0, 1.0, s);
    s.synchronize();
    expect(std::fabs(total.item() - 8.f) < 1e-4f && sorted.values.numel() == 128 && c.numel() == 128 && z.size(0) == 16,
           "results on the stream");
    // The values, against the host: each row sorted, its running sum, the transpose.
    const auto h = x.to_vector(), got_sorted = sorted.values.to_vector(), got_c = c.to_vector(), got_z = z.to_vector();
    bool ok = true;
    for (std::size_t r = 0; r < 8; ++r) {
        std::vector<float> row(h.begin() + std::ptrdiff_t(r * 16), h.begin() + std::ptrdiff_t(r * 16 + 16));
        double running = 0;
        for (std::size_t k = 0; k < 16; ++k) {
            running += row[k];
            ok = ok && std::fabs(got_c[r * 16 + k] - running) <= 1e-4 && got_z[k * 8 + r] == row[k];
        }
        std::sort(row.begin(), row.end());
        ok = ok && std::equal(row.begin(), row.end(), got_sorted.begin() + std::ptrdiff_t(r * 16));
    }
    expect(ok, "sort, cumsum or the transpose on the stream differ from the host's");
};
DEFINED("streams", "item() after a write on another stream waits for it") {
    // A kernel holds stream s until the host opens a gate; the write queued behind it must land
    // before item() and to_vector() read, though they read on the current (default) stream.
    const Stream s = Stream::create();
    const Gate gate;
    const auto x = full<float>({1}, -1.f), z = full<float>({3}, -1.f);
    const auto y = full<float>({64}, 3.f);
    rt::device_synchronize();
    gate.hold(s);
    (x = y.slice(0, 0, 1) * 2).run(s);
    (z = y.slice(0, 0, 3) + 1).run(s);
    std::jthread opener = gate.open_later();
    const float v = x.item();
    const auto w = z.to_vector();
    opener.join();
    expect(v == 6.f, "item() read " + std::to_string(v) + " before the write on the other stream");
    expect(w == std::vector<float>(3, 4.f), "to_vector() read before the write on the other stream");
};
DEFINED("streams", "a pinned tensor read after an asynchronous copy_ into it sees the copy") {
    // copy_ from the device into pinned memory returns once queued; item() and to_vector() on the
    // pinned tensor must wait for it (here it sits behind a gated kernel).
    const Stream s = Stream::create();
    const Gate gate;
    const auto d = full<float>({3}, -1.f), y = full<float>({3}, 3.f);
    const auto p = full<float>({3}, -1.f, {.space = MemorySpace::pinned}), q = full<float>({1}, -1.f, {.space = MemorySpace::pinned});
    rt::device_synchronize();
    gate.hold(s);
    (d = y + 1).run(s);
    p.copy_(d);
    q.copy_(d.slice(0, 0, 1));
    std::jthread opener = gate.open_later();
    const float v = q.item();
    const auto w = p.to_vector();
    opener.join();
    expect(v == 4.f, "item() of the pinned tensor read " + std::to_string(v) + " before the copy landed");
    expect(w == std::vector<float>(3, 4.f), "to_vector() of the pinned tensor read before the copy landed");
};
DEFINED("copies", "copy_ from the host into a column writes only the column") {
    // A host source into a strided device view: uploaded, then scattered on the device, so only the
    // view's elements change (the columns around it keep a write queued just before).
    const auto a = full<float>({5, 3}, 1.f);
    const auto col = from_host<float>({7.f, 8.f, 9.f, 10.f, 11.f}, {5}, {.space = MemorySpace::host});
    (a = a * 2).run();
    a.select(1, 1).copy_(col);
    const auto v = a.to_vector();
    for (int r = 0; r < 5; ++r)
        expect(v[std::size_t(r * 3)] == 2.f && v[std::size_t(r * 3 + 1)] == 7.f + float(r) && v[std::size_t(r * 3 + 2)] == 2.f,
               "row " + std::to_string(r) + " after the column copy");
};

// ---- devices ------------------------------------------------------------------------------------
BAD("devices", "set_device(99)", Expect::invalid_argument, "device 99 does not exist") { set_device(Device{99}); };
BAD("devices", "DeviceGuard(-1)", Expect::invalid_argument, "device -1 does not exist") { DeviceGuard g(Device{-1}); };
BAD("devices", "properties of device 9", Expect::invalid_argument, "device 9") { (void)properties(Device{9}); };
BAD("devices", "a tensor on device 4", Expect::invalid_argument, "device 4") { (void)zeros<float>({2}, {.device = Device{4}}); };
BAD("devices", "a stream on device 3", Expect::invalid_argument, "device 3") { (void)Stream::create({}, Device{3}); };
BAD("devices", "an event on device 3", Expect::invalid_argument, "device 3") { Event e(true, Device{3}); };
BAD("devices", "stats of device 2", Expect::invalid_argument, "device 2") { (void)memory::stats(Device{2}); };
BAD_ENV("devices", "operands on two devices", Expect::invalid_argument, "device", {{"TESSEL_SIM_DEVICES", "2"}}) {
    const auto a = zeros<float>({3}, {.device = Device{0}}), b = zeros<float>({3}, {.device = Device{1}});
    (void)evaluate(a + b);
};
BAD_ENV("devices", "record_stream with another device's stream", Expect::invalid_argument, "belongs to device 1",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    const auto t = zeros<float>({4}, {.device = Device{0}});
    const Stream s = Stream::create({}, Device{1});
    memory::record_stream(t.data(), s, Device{0});
};
BAD_ENV("devices", "memory::allocate on the current device with another device's stream", Expect::invalid_argument,
        "belongs to device 1, but the memory is allocated on the current device 0", {{"TESSEL_SIM_DEVICES", "2"}}) {
    const Stream s = Stream::create({}, Device{1});
    void* p = memory::allocate(64, s);
    memory::deallocate(p);
};
BAD_ENV("devices", "copy_ between devices needs no stream of the wrong device", Expect::defined, "",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    const auto a = full<float>({5}, 4.f, {.device = Device{0}});
    const auto b = zeros<float>({5}, {.device = Device{1}});
    b.copy_(a);
    expect(b.to_vector() == std::vector<float>(5, 4.f), "peer copy");
};
BAD_ENV("devices", "copy_ on a stream of another device", Expect::invalid_argument, "belongs to device 0, the tensors are on device 1",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    const auto a = full<float>({5}, 4.f, {.device = Device{0}});
    const auto b = zeros<float>({5}, {.device = Device{1}});
    b.copy_(a, Stream::create({}, Device{0}));
};
// Every op that takes a stream refuses one of another device, naming both devices, before any work.
#define TESSEL_WRONG_STREAM_CASE(name, ...)                                                                           \
    BAD_ENV("devices", name " on a stream of another device", Expect::invalid_argument,                              \
            "belongs to device 0, the tensors are on device 1", {{"TESSEL_SIM_DEVICES", "2"}}) {                      \
        const auto x = ones<float>({4, 4}, {.device = Device{1}});                                                   \
        const Stream s0 = Stream::create({}, Device{0});                                                             \
        __VA_ARGS__;                                                                                                 \
    };
TESSEL_WRONG_STREAM_CASE("sum", (void)sum(x, {}, false, s0.handle()))
TESSEL_WRONG_STREAM_CASE("sum over an axis of an expression", (void)sum(x * 2, {0}, false, s0.handle()))
TESSEL_WRONG_STREAM_CASE("softmax", (void)softmax(x, -1, s0.handle()))
TESSEL_WRONG_STREAM_CASE("sort", (void)sort(x, -1, false, s0.handle()))
TESSEL_WRONG_STREAM_CASE("cumsum", (void)cumsum(x, -1, s0.handle()))
TESSEL_WRONG_STREAM_CASE("an expression's run", (x = x * 2).run(s0))
TESSEL_WRONG_STREAM_CASE("evaluate", (void)evaluate(x * 2, s0.handle()))
TESSEL_WRONG_STREAM_CASE("uniform_fill", uniform_fill(x, 1, 0, 0, 1, s0.handle()))
TESSEL_WRONG_STREAM_CASE("a factory", (void)empty<float>({4}, {.device = Device{1}, .stream = s0.handle()}))
TESSEL_WRONG_STREAM_CASE("clone", (void)x.clone(s0.handle()))
// Another device's default stream is a null handle, as this device's: passed as a Stream it keeps its device.
TESSEL_WRONG_STREAM_CASE("sum (another device's default stream)", (void)sum(x, {}, false, Stream::default_stream(Device{0})))
TESSEL_WRONG_STREAM_CASE("an expression's run (another device's default stream)", (x = x * 2).run(Stream::default_stream(Device{0})))
TESSEL_WRONG_STREAM_CASE("copy_ (another device's default stream)", x.copy_(ones<float>({4, 4}, {.device = Device{1}}), Stream::default_stream(Device{0})))
#undef TESSEL_WRONG_STREAM_CASE
// Every device's default stream is the null handle: a read on device 0's must still wait for a write
// on device 1's (gated, so a read that does not wait sees the old value).
BAD_ENV("devices", "to() onto device 0 waits for a write on device 1's default stream", Expect::defined, "",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    const Gate gate(Device{1});
    const auto x = full<float>({4}, -1.f, {.device = Device{1}}), y = full<float>({4}, 3.f, {.device = Device{1}});
    synchronize_device(Device{1});  // the fills above ran on device 1's default stream
    {
        DeviceGuard g(Device{1});
        gate.hold(nullptr);
        (x = y * 2).run();  // device 1's default stream, behind the gate
    }
    std::jthread opener = gate.open_later();
    const auto on0 = x.to({.device = Device{0}});  // current device 0: its default stream
    const auto v = on0.to_vector();
    opener.join();
    expect(v == std::vector<float>(4, 6.f), "to() read " + std::to_string(v[0]) + " before the write on device 1");
};
BAD_ENV("devices", "item() of a device-1 tensor from device 0 reads after its write", Expect::defined, "",
        {{"TESSEL_SIM_DEVICES", "2"}}) {
    const Gate gate(Device{1});
    const auto x = full<float>({1}, -1.f, {.device = Device{1}}), y = full<float>({1}, 3.f, {.device = Device{1}});
    // The fills ran on device 1's default stream; `s` is non-blocking and its kernel reads y, so
    // (as in CUDA) they must have landed first. Found by TSan's slower schedule: x read NaN.
    synchronize_device(Device{1});
    const Stream s = Stream::create({}, Device{1});
    gate.hold(s);
    (x = y * 2).run(s);
    std::jthread opener = gate.open_later();
    const float v = x.item();  // current device 0
    opener.join();
    expect(v == 6.f, "item() read " + std::to_string(v) + " before the write on device 1's stream");
};

// ---- allocator ------------------------------------------------------------------------------------
BAD("allocator", "deallocate a pointer it never gave", Expect::invalid_argument, "not the start of a live allocation") {
    static float x[4];
    memory::deallocate(x);
};
BAD("allocator", "deallocate twice", Expect::invalid_argument, "freed twice") {
    void* p = memory::allocate(1024);
    memory::deallocate(p);
    memory::deallocate(p);
};
BAD("allocator", "deallocate the middle of a block", Expect::invalid_argument, "not the start") {
    void* p = memory::allocate(1024);
    struct Free {
        void* p;
        ~Free() { memory::deallocate(p); }
    } f{p};
    memory::deallocate(static_cast<char*>(p) + 16);
};
BAD("allocator", "deallocate_host of a foreign pointer", Expect::invalid_argument, "") {
    static float x[4];
    memory::deallocate_host(x);
};
BAD("allocator", "set_memory_fraction(1.5)", Expect::invalid_argument, "not in (0, 1]") { memory::set_memory_fraction(1.5); };
BAD("allocator", "set_memory_fraction(NaN)", Expect::invalid_argument, "not in (0, 1]") { memory::set_memory_fraction(std::nan("")); };
DEFINED("allocator", "allocate(0) is null and free of null is a no-op") {
    void* p = memory::allocate(0);
    memory::deallocate(p);
    expect(p == nullptr, "allocate(0)");
};
DEFINED("allocator", "stats index by StatPool and the PyTorch names agree") {
    const auto t = dev({1000});
    const auto st = memory::stats();
    expect(st.allocated_bytes[memory::StatPool::all].current == memory::allocated() && memory::allocated() > 0 &&
               memory::reserved() >= memory::allocated() && memory::max_allocated() >= memory::allocated(),
           "allocated/reserved/max_allocated");
};
BAD_ENV("allocator", "out of memory, then the cache is freed and the next request succeeds", Expect::out_of_memory,
        "tried to allocate", {{"TESSEL_SIM_MEMORY", "64MiB"}}) {
    { const auto keep = empty<float>({std::int64_t(10) << 20}); }  // 40 MiB cached after this
    try {
        (void)empty<float>({std::int64_t(20) << 20});  // 80 MiB: more than the device
    } catch (const OutOfMemoryError&) {
        const auto ok = empty<float>({std::int64_t(12) << 20});  // 48 MiB: fits once the cache is released
        robustness::expect(ok.numel() == (std::int64_t(12) << 20), "allocation after OOM");
        throw;
    }
};

// ---- the pipeline -----------------------------------------------------------------------------------
BAD("pipeline", "device input", Expect::invalid_argument, "the input must be a contiguous host or pinned tensor") {
    overlap_pipeline(dev({4}), host({4}), [](const Tensor<float>&, const Tensor<float>&, rt::stream_t) {});
};
BAD("pipeline", "strided output", Expect::invalid_argument, "strided") {
    overlap_pipeline(host({4, 4}), host({4, 4}).transpose(0, 1), [](const Tensor<float>&, const Tensor<float>&, rt::stream_t) {});
};
BAD("pipeline", "element counts differ", Expect::invalid_argument, "16 elements") {
    overlap_pipeline(host({4, 4}), host({15}), [](const Tensor<float>&, const Tensor<float>&, rt::stream_t) {});
};
BAD("pipeline", "zero streams", Expect::invalid_argument, "streams (0)") {
    overlap_pipeline(host({4}), host({4}), [](const Tensor<float>&, const Tensor<float>&, rt::stream_t) {}, {.streams = 0});
};
DEFINED("pipeline", "chunk_elements beyond the input (its byte size would wrap)") {
    std::vector<float> in(10), out(10, -1.f);
    for (int i = 0; i < 10; ++i) in[std::size_t(i)] = float(i);
    overlap_pipeline(std::span<const float>(in), std::span<float>(out),
                     [](const float* i, float* o, std::size_t n, rt::stream_t s) { rt::memcpy_async(o, i, n * sizeof(float), s); },
                     {.chunk_elements = (std::size_t(1) << 62) + 1});
    expect(out == in, "copied through one chunk of the input's size");
};
BAD("pipeline", "undefined input", Expect::invalid_argument, "undefined") {
    overlap_pipeline(Tensor<float>{}, host({4}), [](const Tensor<float>&, const Tensor<float>&, rt::stream_t) {});
};
DEFINED("pipeline", "tensors through the device in chunks") {
    const auto in = arange<float>(0, 1000, 1, {.space = MemorySpace::pinned});
    const auto out = empty<float>({1000}, {.space = MemorySpace::host});
    overlap_pipeline(in, out, [](const Tensor<float>& x, const Tensor<float>& y, rt::stream_t s) { (y = x * 3 + 1).run(s); },
                     {.chunk_elements = 97, .streams = 3});
    const auto v = out.to_vector();
    for (int i = 0; i < 1000; ++i) expect(v[std::size_t(i)] == 3.f * float(i) + 1.f, "element " + std::to_string(i));
};

// ---- environment ----------------------------------------------------------------------------------
namespace {
// The first thing a program does with a device: the bad setting must surface here, by name.
void use_a_device() { (void)zeros<float>({4}); }
}  // namespace
#if defined(TESSEL_BACKEND_SIM)
#define ENV_CASE(var, value, fragment)                                                                                    \
    BAD_ENV("environment", var "=" value, Expect::invalid_argument, fragment, {{var, value}}) { use_a_device(); }
ENV_CASE("TESSEL_SIM_DEVICES", "abc", "TESSEL_SIM_DEVICES='abc' is not an integer between 1 and 64");
ENV_CASE("TESSEL_SIM_DEVICES", "-1", "TESSEL_SIM_DEVICES='-1'");
ENV_CASE("TESSEL_SIM_DEVICES", "0", "between 1 and 64");
ENV_CASE("TESSEL_SIM_DEVICES", "65", "between 1 and 64");
ENV_CASE("TESSEL_SIM_DEVICES", "2x", "TESSEL_SIM_DEVICES='2x'");
ENV_CASE("TESSEL_SIM_DEVICES", " 2", "TESSEL_SIM_DEVICES=' 2'");
ENV_CASE("TESSEL_SIM_DEVICES", "99999999999999999999999", "between 1 and 64");
ENV_CASE("TESSEL_SIM_MEMORY", "-5", "TESSEL_SIM_MEMORY='-5' is not a size");
ENV_CASE("TESSEL_SIM_MEMORY", "12QB", "TESSEL_SIM_MEMORY='12QB'");
ENV_CASE("TESSEL_SIM_MEMORY", "99999999TiB", "TESSEL_SIM_MEMORY='99999999TiB'");
ENV_CASE("TESSEL_SIM_MEMORY", "0", "not a size between 1 and");
ENV_CASE("TESSEL_SIM_MEMORY", "1.5GiB", "TESSEL_SIM_MEMORY='1.5GiB'");
ENV_CASE("TESSEL_SIM_MEMORY", "18446744073709551616", "TESSEL_SIM_MEMORY");
ENV_CASE("TESSEL_SIM_WORKERS", "-3", "TESSEL_SIM_WORKERS='-3' is not an integer between 0 and 1024");
ENV_CASE("TESSEL_SIM_WORKERS", "many", "TESSEL_SIM_WORKERS='many'");
ENV_CASE("TESSEL_SIM_SHUFFLE", "1.5", "TESSEL_SIM_SHUFFLE='1.5'");
ENV_CASE("TESSEL_SIM_SHUFFLE", "-7", "TESSEL_SIM_SHUFFLE='-7'");
ENV_CASE("TESSEL_SIM_STACK_KB", "8", "TESSEL_SIM_STACK_KB='8' is not an integer between 64 and 1048576");
ENV_CASE("TESSEL_SIM_STACK_KB", "4294967296", "TESSEL_SIM_STACK_KB");
ENV_CASE("TESSEL_SIM_PEER", "yes", "TESSEL_SIM_PEER='yes' is not an integer between 0 and 1");
ENV_CASE("TESSEL_SIM_NVML_LOST", "-1", "TESSEL_SIM_NVML_LOST='-1' is not an integer between 0 and 63");
ENV_CASE("TESSEL_SIM_CUDA_UNAVAILABLE", "true", "TESSEL_SIM_CUDA_UNAVAILABLE='true' is not an integer between 0 and 1");
#undef ENV_CASE
BAD_ENV("environment", "TESSEL_SIM_NVML_LOST names a device the sim lacks", Expect::invalid_argument,
        "TESSEL_SIM_NVML_LOST=2 names no device: the sim has 2 (TESSEL_SIM_DEVICES), indices 0 to 1",
        {{"TESSEL_SIM_DEVICES", "2"}, {"TESSEL_SIM_NVML_LOST", "2"}}) {
    use_a_device();
};
BAD_ENV("environment", "a device when CUDA finds none (TESSEL_SIM_CUDA_UNAVAILABLE=1)", Expect::unsupported,
        "the CUDA runtime reports cudaErrorNoDevice (no CUDA-capable device is detected)", {{"TESSEL_SIM_CUDA_UNAVAILABLE", "1"}}) {
    use_a_device();
};
BAD_ENV("environment", "device_count() never throws and says why", Expect::defined, "", {{"TESSEL_SIM_DEVICES", "zero"}}) {
    expect(device_count() == 0 && !is_available(), "no devices with a bad setting");
    expect(unavailable_reason().find("TESSEL_SIM_DEVICES='zero'") != std::string::npos, "reason: " + unavailable_reason());
};
BAD_ENV("environment", "an empty variable means the default", Expect::defined, "", {{"TESSEL_SIM_DEVICES", ""}}) {
    expect(device_count() == 1, "one device by default");
};
BAD_ENV("environment", "TESSEL_SIM_MEMORY=1MiB is honoured", Expect::out_of_memory, "tried to allocate", {{"TESSEL_SIM_MEMORY", "1MiB"}}) {
    (void)empty<float>({1 << 20});
};
#endif
#define ALLOC_CASE(value, fragment)                                                                                       \
    BAD_ENV("environment", "TESSEL_ALLOC_CONF=" value, Expect::invalid_argument, fragment, {{"TESSEL_ALLOC_CONF", value}}) { \
        use_a_device();                                                                                                   \
    }
ALLOC_CASE("max_split_size_mb:-1", "max_split_size_mb='-1' is not an integer between 21 and");
ALLOC_CASE("max_split_size_mb:20", "max_split_size_mb='20' is not an integer between 21 and");  // the 20 MiB segments would be oversize
ALLOC_CASE("max_split_size_mb:5", "max_split_size_mb='5'");
ALLOC_CASE("max_split_size_mb:99999999999999999999", "max_split_size_mb='99999999999999999999'");
ALLOC_CASE("max_split_size_mb:8796093022208", "max_split_size_mb='8796093022208' is not an integer between 21 and 8796093022207");
ALLOC_CASE("max_split_size_mb:", "max_split_size_mb=''");
ALLOC_CASE("backend:gpu", "backend must be native or async, not 'gpu'");
ALLOC_CASE("garbage", "'garbage' is not key:value");
ALLOC_CASE("colour:red", "unknown key 'colour'");
#undef ALLOC_CASE
BAD("rows", "rms_norm with a NaN eps", Expect::invalid_argument, "eps") { (void)rms_norm(dev({3, 4}), {}, std::nan("")); };
BAD("reductions", "stddev with a negative correction", Expect::invalid_argument, "correction -2") { (void)stddev(dev({4}), {}, -2); };
BAD("shapes", "reshape to a different element count names reshape", Expect::invalid_argument, "reshape: shape [5]") {
    (void)dev({4, 6}).reshape({5});
};
DEFINED("aliasing", "in place with a dim of size 1 (found by the fuzzer)") {
    const auto a = full<float>({4, 1}, 2.f), s = full<float>({1}, 3.f);
    (a += a).run();
    (s = s * 2).run();
    expect(a.to_vector() == std::vector<float>(4, 4.f) && s.item() == 6.f, "a += a and s = s * 2");
};
