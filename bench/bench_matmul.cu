// Matrix products through tessel::matmul, per dtype, hand-written against the library on the same
// problem, and the CPU beside them:
//   BM_matmul/tessel/<dtype>/<n>    square n^3, MatmulPolicy::handwritten (simt_matmul for f32, mma_matmul otherwise)
//   BM_matmul/cublas/<dtype>/<n>    MatmulPolicy::library (cuBLAS, or cuBLASLt for tf32/int8/e4m3)
//   BM_matmul/openblas/f32/<n>      the same fp32 product on the host's cores through OpenBLAS, when
//                                   the build found it: bench/report.py shows the GPU's speed-up
//   BM_matmul_llm/<impl>/<dtype>/<M>x<N>x<K>   the LLM shapes of issue 12: 4096 x 4096 x 14336 (an
//                                   MLP's up projection), 8192 x 1024 x 8192, 16 x 4096 x 4096 (decode)
// dtypes: f32 (exact fp32), tf32 (allow_tf32), bf16 (bf16 out), int8 (int32 out, exact), e4m3 (fp8,
// bf16 out, library only, sm_89+). f32 and bf16 take B by rows; tf32, int8 and e4m3 take B as a
// weight [N, K] read through its transpose (the "TN" form their kernels want), so no path copies.
// Each row reports TFLOP/s (GFLOP/s), % of the run's cuBLAS ceiling where one is measured, % of the
// library's speed (the report pairs the rows) and the sampled error against a double host product.
// n = 1024 .. 8192 on a GPU; on the sim 128 and the LLM shapes cut by 32 per dim, a smoke test whose
// times are CPU times.
#include <benchmark/benchmark.h>

#include <chrono>

#include "harness.hpp"
#include "inputs.hpp"
#include "matmul_check.hpp"

#include <tessel/ops/expression.hpp>
#include <tessel/ops/matmul.hpp>

#if defined(TESSEL_BENCH_HAS_OPENBLAS)
#include <cblas.h>
#endif

namespace {

using tessel::Tensor;

bool sim() { return tessel::backend == tessel::Backend::sim; }

enum class Dtype { f32, tf32, bf16, int8, e4m3 };
const char* dtype_name(Dtype d) {
    switch (d) {
        case Dtype::f32: return "f32";
        case Dtype::tf32: return "tf32";
        case Dtype::bf16: return "bf16";
        case Dtype::int8: return "int8";
        case Dtype::e4m3: return "e4m3";
    }
    return "?";
}

// Random [rows, cols] values of T: uniform reals, or for int8 and fp8 reals cast to them (int8:
// [-100, 100] truncated; e4m3: [-4, 4] rounded to 3 mantissa bits).
template <class T>
Tensor<T> operand(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    if constexpr (std::is_same_v<T, std::int8_t> || std::is_same_v<T, __nv_fp8_e4m3>) {
        const double range = std::is_same_v<T, std::int8_t> ? 100 : 4;
        const Tensor<float> x = tessel::bench::random_tensor<float>({rows, cols}, seed, -range, range);
        Tensor<T> t = tessel::empty<T>({rows, cols});
        (t = tessel::cast_to<T>(x)).run();
        return t;
    } else {
        return tessel::bench::random_tensor<T>({rows, cols}, seed);
    }
}

struct Mnk {
    std::int64_t m, n, k;
};

// c [M, N] = a [M, K] @ b [K, N] for T inputs and Out output on `policy`; b_columns: b is a weight
// [N, K] transposed. cold_l2: every sample starts with the L2 flushed, as a layer's weights arrive
// in a model (and as bench/torch_compare.py times PyTorch); otherwise operands that fit in L2 stay
// there between samples.
template <class T, class Out>
void run_product(benchmark::State& state, tessel::MatmulPolicy policy, Dtype dtype, Mnk p, bool cold_l2) {
    const bool b_columns = !(dtype == Dtype::f32 || dtype == Dtype::bf16);
    const Tensor<T> a = operand<T>(p.m, p.k, 1), w = b_columns ? operand<T>(p.n, p.k, 2) : operand<T>(p.k, p.n, 2);
    const Tensor<T> b = b_columns ? w.transpose(0, 1) : w;
    Tensor<Out> c = tessel::empty<Out>({p.m, p.n});
    tessel::Stream s = tessel::current_stream();
    tessel::MatmulOptions o{.policy = policy, .allow_tf32 = dtype == Dtype::tf32, .stream = s.handle()};
    tessel::MatmulEpilogue<Out> e{};
    if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
        if (tessel::properties().major * 10 + tessel::properties().minor < 89) {
            state.SkipWithError("fp8 products need sm_89 or newer");
            return;
        }
        e.a_scale = tessel::full<float>({1}, 1.f), e.b_scale = tessel::full<float>({1}, 1.f);
    }
    tessel::bench::time_region(state, s, [&] { tessel::matmul(a, b, c, o, e); }, {.flush_l2 = cold_l2});
    const double flops = 2.0 * double(p.m) * double(p.n) * double(p.k);
    const auto& ceil = tessel::bench::ceilings();
    tessel::bench::report_flops(state, flops, dtype == Dtype::f32 ? ceil.sgemm_tflops : dtype == Dtype::bf16 ? ceil.bf16_tflops : 0);
    // Bounds: fp32 accumulation's k 2^-24; tf32's inputs rounded to 2^-11 each; a bf16 output's
    // rounding 2^-8 of the value (at most of sum|ab|); int8 exact; e4m3's inputs are what they are
    // (the reference reads the rounded values), so only accumulation and the bf16 output remain.
    const double k = double(p.k);
    const double bound = dtype == Dtype::int8 ? 0 : dtype == Dtype::tf32 ? 2 * 0x1p-11 + k * 0x1p-24
                         : dtype == Dtype::f32 ? k * 0x1p-24 : 0x1p-8 + k * 0x1p-24;
    tessel::bench::check_result(state, [&] { return tessel::bench::sampled_matmul_error(a, b, c, 16, b_columns); }, bound);
    state.SetLabel(std::string(tessel::last_matmul_choice().implementation) + ", " + dtype_name(dtype) + " " + std::to_string(p.m) + "x" +
                   std::to_string(p.n) + "x" + std::to_string(p.k));
}

void BM_matmul(benchmark::State& state, tessel::MatmulPolicy policy, Dtype dtype, Mnk p, bool cold_l2) {
    switch (dtype) {
        case Dtype::f32:
        case Dtype::tf32: return run_product<float, float>(state, policy, dtype, p, cold_l2);
        case Dtype::bf16: return run_product<__nv_bfloat16, __nv_bfloat16>(state, policy, dtype, p, cold_l2);
        case Dtype::int8: return run_product<std::int8_t, int>(state, policy, dtype, p, cold_l2);
        case Dtype::e4m3: return run_product<__nv_fp8_e4m3, __nv_bfloat16>(state, policy, dtype, p, cold_l2);
    }
}

// Registers the hand-written (tessel) and library (cublas) rows of a problem for every dtype.
void register_products(const std::string& family, const std::string& shape, Mnk p, bool cold_l2) {
    for (Dtype d : {Dtype::f32, Dtype::tf32, Dtype::bf16, Dtype::int8, Dtype::e4m3}) {
        const std::string dt = std::string("/") + dtype_name(d) + "/" + shape;
        if (d != Dtype::e4m3)  // no hand-written fp8 kernel
            benchmark::RegisterBenchmark((family + "/tessel" + dt).c_str(), tessel::bench::guarded(BM_matmul), tessel::MatmulPolicy::handwritten, d, p, cold_l2)->UseManualTime();
        benchmark::RegisterBenchmark((family + "/cublas" + dt).c_str(), tessel::bench::guarded(BM_matmul), tessel::MatmulPolicy::library, d, p, cold_l2)->UseManualTime();
    }
}

#if defined(TESSEL_BENCH_HAS_OPENBLAS)
// The same fp32 product on the host: cblas_sgemm on every core OpenBLAS uses, wall-clock time.
void BM_matmul_openblas(benchmark::State& state, int n) {
    std::vector<float> a(std::size_t(n) * n), b(a.size()), c(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(i % 17) / 17 - 0.5f, b[i] = float(i % 13) / 13 - 0.5f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);  // warm-up
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
        state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    tessel::bench::report_flops(state, 2.0 * double(n) * n * n);
    state.SetLabel("cblas_sgemm (OpenBLAS, host CPU), f32 " + std::to_string(n) + "^3");
}
#endif

const bool registered = [] {
    const std::vector<int> sizes = sim() ? std::vector<int>{128} : std::vector<int>{1024, 2048, 4096, 8192};
    for (int n : sizes) {
        // Cold L2 where PyTorch has rows to compare (4096 and up: 32 MiB of int8 operands would fit).
        register_products("BM_matmul", std::to_string(n), {n, n, n}, n >= 4096);
#if defined(TESSEL_BENCH_HAS_OPENBLAS)
        if (n <= 4096)  // 8192^3 is seconds per product on a CPU
            benchmark::RegisterBenchmark(("BM_matmul/openblas/f32/" + std::to_string(n)).c_str(), tessel::bench::guarded(BM_matmul_openblas), n)->UseManualTime();
#endif
    }
    // The names keep the full shape (the dispatch table's shape class reads it); the sim runs it cut.
    // Cold L2: the decode shape's 32 MiB of weights would otherwise be read from L2, not memory.
    const std::int64_t cut = sim() ? 32 : 1;
    for (Mnk p : {Mnk{4096, 4096, 14336}, Mnk{8192, 1024, 8192}, Mnk{16, 4096, 4096}})
        register_products("BM_matmul_llm", std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k),
                          {std::max<std::int64_t>(p.m / cut, 16), p.n / cut, p.k / cut}, true);
    return true;
}();

}  // namespace
