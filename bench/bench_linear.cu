// Matrix products through the public API (tessel::matmul, tessel::linear), where dispatch, checks
// and epilogues count:
//  - BM_linear_bias_gelu: gelu(x @ W^T + b) in bf16, fused into mma_matmul's store (tessel) against
//    cuBLAS's GEMM followed by a separate bias + GELU kernel (cublas);
//  - BM_matmul_host_overhead: the host time of one matmul call (shape checks, dispatch, launch),
//    per call, without the device work.
// (The LLM shapes, per dtype, are bench_matmul.cu's BM_matmul_llm.) On the sim the product is cut to
// 256 as a smoke test whose times are CPU times.
#include <benchmark/benchmark.h>

#include <chrono>

#include "harness.hpp"
#include "inputs.hpp"
#include "matmul_check.hpp"

#include <tessel/ops/expression.hpp>
#include <tessel/ops/matmul.hpp>

namespace {

using tessel::Tensor;
using Bf16 = __nv_bfloat16;

bool sim() { return tessel::backend == tessel::Backend::sim; }

// Largest |y - gelu(x W^T + b)| / (sum_k |x w| + |b| + 1) over 32 sampled outputs.
double sampled_linear_error(const Tensor<Bf16>& x, const Tensor<Bf16>& w, const Tensor<Bf16>& b, const Tensor<Bf16>& y) {
    const auto hx = x.to_vector(), hw = w.to_vector(), hb = b.to_vector(), hy = y.to_vector();
    const std::int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
    double worst = 0;
    for (std::int64_t s = 0; s < 32; ++s) {
        const std::int64_t i = (s * 7919) % rows, o = (s * 104729 + 3) % out;
        double acc = tessel::bench::as_double(hb[std::size_t(o)]), mag = std::fabs(acc) + 1;
        for (std::int64_t c = 0; c < in; ++c) {
            const double p = tessel::bench::as_double(hx[std::size_t(i * in + c)]) * tessel::bench::as_double(hw[std::size_t(o * in + c)]);
            acc += p;
            mag += std::fabs(p);
        }
        const double want = 0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0)));
        worst = std::max(worst, std::fabs(tessel::bench::as_double(hy[std::size_t(i * out + o)]) - want) / mag);
    }
    return worst;
}

enum class Impl { tessel, cublas };

void BM_linear_bias_gelu(benchmark::State& state, Impl impl) {
    const std::int64_t n = sim() ? 256 : 4096;
    const auto x = tessel::bench::random_tensor<Bf16>({n, n}, 1), w = tessel::bench::random_tensor<Bf16>({n, n}, 2);
    const auto b = tessel::bench::random_tensor<Bf16>({n}, 3);
    Tensor<Bf16> y = tessel::empty<Bf16>({n, n});
    tessel::Stream s = tessel::current_stream();
    auto body = [&] {
        if (impl == Impl::tessel) {
            tessel::matmul(x, w.transpose(0, 1), y, tessel::MatmulOptions{.policy = tessel::MatmulPolicy::handwritten, .stream = s.handle()},
                           tessel::MatmulEpilogue<Bf16>{.bias = b, .activation = tessel::Activation::gelu});
        } else {
            tessel::matmul(x, w.transpose(0, 1), y, tessel::MatmulOptions{.policy = tessel::MatmulPolicy::library, .stream = s.handle()});
            (y = tessel::gelu(y + b)).run(s);  // the separate bias + GELU kernel
        }
    };
    tessel::bench::time_region(state, s, body, {.flush_l2 = !sim()});  // cold, as torch_compare.py times PyTorch's row
    tessel::bench::report_flops(state, 2.0 * double(n) * n * n, tessel::bench::ceilings().bf16_tflops);
    // Two bf16 roundings at most (the unfused baseline rounds the product first) plus fp32 accumulation.
    tessel::bench::check_result(state, [&] { return sampled_linear_error(x, w, b, y); }, 2 * 0x1p-8 + double(n) * 0x1p-24);
    state.SetLabel(std::string(impl == Impl::tessel ? "tessel::linear, bias + gelu fused" : "cuBLAS GEMM, then (y = gelu(y + b)).run()") +
                   ", bf16 " + std::to_string(n) + "^3");
}

// Host time per call of tessel::matmul on a 64 x 64 x 64 fp32 product (the device work is not
// waited for inside the timed calls): validation, dispatch, handle and workspace lookup, launch.
void BM_matmul_host_overhead(benchmark::State& state, tessel::MatmulPolicy policy) {
    const auto a = tessel::bench::random_tensor<float>({64, 64}, 6), b = tessel::bench::random_tensor<float>({64, 64}, 7);
    Tensor<float> c = tessel::empty<float>({64, 64});
    tessel::Stream s = tessel::current_stream();
    const tessel::MatmulOptions o{.policy = policy, .stream = s.handle()};
    tessel::matmul(a, b, c, o);
    s.synchronize();
    constexpr int calls = 32;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) tessel::matmul(a, b, c, o);
        const auto t1 = std::chrono::steady_clock::now();
        s.synchronize();
        state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count() / calls);
    }
    state.SetLabel(std::string("host time per matmul call, ") + tessel::policy_name(policy) + ", 64^3 fp32");
}

const bool registered = [] {
    for (Impl impl : {Impl::tessel, Impl::cublas})
        benchmark::RegisterBenchmark(impl == Impl::tessel ? "BM_linear_bias_gelu/tessel/bf16" : "BM_linear_bias_gelu/cublas/bf16",
                                     tessel::bench::guarded(BM_linear_bias_gelu), impl)
            ->UseManualTime();
    for (auto policy : {tessel::MatmulPolicy::handwritten, tessel::MatmulPolicy::library})
        benchmark::RegisterBenchmark((std::string("BM_matmul_host_overhead/") + tessel::policy_name(policy)).c_str(), tessel::bench::guarded(BM_matmul_host_overhead),
                                     policy)
            ->UseManualTime()
            ->Iterations(sim() ? 20 : 200);  // the timed host part is microseconds; the device work between samples is not
    return true;
}();

}  // namespace
