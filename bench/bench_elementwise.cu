// Element-wise expressions: d = a * b + c in fp32 and bf16 (bf16 computed in float), and the fp32 ->
// bf16 cast (as an expression into an existing tensor, and as Tensor::to<U>()), as GB/s (bytes read + written) and % of the device copy bandwidth measured in the same
// run. On the CUDA build the same work through CUB's DeviceTransform is the vendor comparison
// (BM_fma/cub/...). GPU: 256 MiB per fp32 operand (1 GiB moved per fp32 a*b+c); sim: 4 MiB, a
// smoke test whose times are CPU times.
#include <benchmark/benchmark.h>

#include "harness.hpp"
#include "inputs.hpp"

#include <tessel/ops/assign.hpp>

#if defined(TESSEL_BACKEND_CUDA)
#include <cub/device/device_transform.cuh>
#endif

#include <chrono>
#include <cmath>

namespace {

using tessel::Tensor;

std::int64_t elements() { return tessel::backend == tessel::Backend::sim ? (std::int64_t(1) << 20) : (std::int64_t(1) << 26); }

// Largest |got - want| / (|a b| + |c|) over a sample of 4096 elements against a double reference
// (scaled by the terms, not the result, which may cancel to near zero).
template <class T>
double sampled_error(const Tensor<T>& a, const Tensor<T>& b, const Tensor<T>& c, const Tensor<T>& d) {
    const auto av = a.to_vector(), bv = b.to_vector(), cv = c.to_vector(), dv = d.to_vector();
    double worst = 0;
    for (std::size_t i = 0; i < dv.size(); i += std::max<std::size_t>(1, dv.size() / 4096)) {
        const double want = double(float(av[i])) * double(float(bv[i])) + double(float(cv[i]));
        const double scale = std::fabs(double(float(av[i])) * double(float(bv[i]))) + std::fabs(double(float(cv[i])));
        worst = std::max(worst, std::fabs(double(float(dv[i])) - want) / std::max(scale, 1e-30));
    }
    return worst;
}

template <class T>
struct Fma {
    __host__ __device__ T operator()(T a, T b, T c) const { return T(float(a) * float(b) + float(c)); }
};

// impl 0: tessel's expression, 1: CUB DeviceTransform (CUDA build only).
template <class T>
void BM_fma(benchmark::State& state, int impl) {
    const std::int64_t n = elements();
    using tessel::bench::random_tensor;
    auto a = random_tensor<T>({n}, 1), b = random_tensor<T>({n}, 2), c = random_tensor<T>({n}, 3);
    auto d = tessel::empty<T>({n});
    tessel::Stream s = tessel::current_stream();
    auto body = [&] {
        if (impl == 0) {
            (d = a * b + c).run(s);
        } else {
#if defined(TESSEL_BACKEND_CUDA)
            TESSEL_CUDA_CHECK(cub::DeviceTransform::Transform(::cuda::std::make_tuple(a.data(), b.data(), c.data()), d.data(), n,
                                                              Fma<T>{}, s.handle()));
#endif
        }
    };
    tessel::bench::time_region(state, s, body);  // 1 GiB moved per iteration: L2 holds none of it
    tessel::bench::report_bytes(state, 4.0 * double(n) * sizeof(T));
    const double tolerance = sizeof(T) == 4 ? 1e-5 : 1e-2;  // bf16: one rounding of the result, 2^-8
    tessel::bench::check_result(state, [&] { return sampled_error(a, b, c, d); }, tolerance);
    state.SetLabel(std::string(impl == 0 ? "tessel" : "CUB DeviceTransform") + ", " + std::to_string(n) + " elements");
}

// Reports the bytes moved and the worst relative error of y = bf16(x) over every 97th element.
void report_bf16_cast(benchmark::State& state, const tessel::Tensor<float>& x, const tessel::Tensor<__nv_bfloat16>& y) {
    tessel::bench::report_bytes(state, 6.0 * double(x.numel()));
    tessel::bench::check_result(state, [&] {
        const auto xv = x.to_vector();
        const auto yv = y.to_vector();
        double worst = 0;
        for (std::size_t i = 0; i < yv.size(); i += 97)
            worst = std::max(worst, std::fabs(double(float(yv[i])) - double(xv[i])) / std::max(std::fabs(double(xv[i])), 1e-3));
        return worst;
    }, 1.0 / 256);
}

void BM_cast_f32_bf16(benchmark::State& state) {
    const std::int64_t n = elements();
    auto x = tessel::bench::random_tensor<float>({n}, 4);
    auto y = tessel::empty<__nv_bfloat16>({n});
    tessel::Stream s = tessel::current_stream();
    tessel::bench::time_region(state, s, [&] { (y = tessel::cast_to<__nv_bfloat16>(x)).run(s); });
    report_bf16_cast(state, x, y);
}

// The same conversion as Tensor::to<U>() spells it: a new tensor from the caching allocator and one
// convert kernel (8 elements per thread: two 16-byte loads, one 16-byte store), as torch's
// x.to(torch.bfloat16).
void BM_to_bf16(benchmark::State& state) {
    const std::int64_t n = elements();
    auto x = tessel::bench::random_tensor<float>({n}, 4);
    tessel::Tensor<__nv_bfloat16> y;
    tessel::Stream s = tessel::current_stream();
    tessel::bench::time_region(state, s, [&] { y = x.to<__nv_bfloat16>(); });
    report_bf16_cast(state, x, y);
    state.SetLabel(std::to_string(n) + " elements, fp32 -> bf16");
}

// The host time of one small assignment (checks, lowering, dispatch, launch) per call, without the
// device work: `d = a * b + c` on 4097 elements and the bias add `y = x + bias` ([33, 129] + [129],
// evaluate_rows). What a chain of small ops pays per op; matmul's is BM_matmul_host_overhead.
void BM_expression_host_overhead(benchmark::State& state, bool bias_add) {
    auto a = tessel::bench::random_tensor<float>({4097}, 5), b = tessel::bench::random_tensor<float>({4097}, 6),
         c = tessel::bench::random_tensor<float>({4097}, 7);
    auto d = tessel::empty<float>({4097});
    auto x = tessel::bench::random_tensor<float>({33, 129}, 8), bias = tessel::bench::random_tensor<float>({129}, 9);
    auto y = tessel::empty<float>({33, 129});
    tessel::Stream s = tessel::current_stream();
    auto call = [&] {
        if (bias_add) (y = x + bias).run(s);
        else (d = a * b + c).run(s);
    };
    call();
    s.synchronize();
    constexpr int calls = 32;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) call();
        const auto t1 = std::chrono::steady_clock::now();
        s.synchronize();
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count() / calls);
    }
    state.SetLabel(bias_add ? "host time per call, y = x + bias, [33, 129] fp32" : "host time per call, d = a * b + c, 4097 fp32");
}

}  // namespace

// Registered by name: the implementation is the second component, so the report pairs tessel with CUB.
const bool registered = [] {
    benchmark::RegisterBenchmark("BM_fma/tessel/f32", tessel::bench::guarded(BM_fma<float>), 0)->UseManualTime();
    benchmark::RegisterBenchmark("BM_fma/tessel/bf16", tessel::bench::guarded(BM_fma<__nv_bfloat16>), 0)->UseManualTime();
#if defined(TESSEL_BACKEND_CUDA)
    benchmark::RegisterBenchmark("BM_fma/cub/f32", tessel::bench::guarded(BM_fma<float>), 1)->UseManualTime();
    benchmark::RegisterBenchmark("BM_fma/cub/bf16", tessel::bench::guarded(BM_fma<__nv_bfloat16>), 1)->UseManualTime();
#endif
    for (bool bias_add : {false, true})
        benchmark::RegisterBenchmark(bias_add ? "BM_expression_host_overhead/bias_add" : "BM_expression_host_overhead/fma",
                                     tessel::bench::guarded(BM_expression_host_overhead), bias_add)
            ->UseManualTime()
            ->Iterations(200);  // the timed host part is microseconds; the device work between samples is not
    return true;
}();
TESSEL_BENCHMARK(BM_cast_f32_bf16)->UseManualTime();
TESSEL_BENCHMARK(BM_to_bf16)->Name("BM_to_bf16/f32")->UseManualTime();
