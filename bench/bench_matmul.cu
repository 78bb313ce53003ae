// Matrix products: the tensor-core kernel (mma_matmul: ldmatrix + mma.sync + a 4-stage cp.async
// pipeline) on bf16 and the SIMT kernel (simt_matmul) on fp32, each against cuBLAS on the same
// row-major problem, as TFLOP/s, % of the cuBLAS rate measured in the same run, and the sampled
// error against a double-precision host product. Square 4096 and 8192 on a GPU; the sim runs 256 as
// a smoke test whose times are CPU times.
#include <benchmark/benchmark.h>

#include "harness.hpp"
#include "inputs.hpp"
#include "matmul_check.hpp"

#include <tessel/kernels/mma_matmul.cuh>
#include <tessel/kernels/simt_matmul.cuh>

namespace {

using tessel::Tensor;

bool sim() { return tessel::backend == tessel::Backend::sim; }

enum class Impl { tessel, cublas };

// bf16 inputs and output, fp32 accumulation: mma_matmul<128 x 128, 4 stages> or cublasGemmEx.
void BM_matmul_bf16(benchmark::State& state, Impl impl, int n) {
    using Tile = tessel::kernels::MmaTile<128, 128, 2, 2, 4>;
    auto a = tessel::bench::random_tensor<__nv_bfloat16>({n, n}, 1);
    auto b = tessel::bench::random_tensor<__nv_bfloat16>({n, n}, 2);
    auto c = tessel::empty<__nv_bfloat16>({n, n});
    tessel::Stream s = tessel::current_stream();
    auto kernel = tessel::kernels::mma_matmul<__nv_bfloat16, __nv_bfloat16, Tile>;
    tessel::rt::set_max_dynamic_smem(kernel, int(Tile::smem_bytes()));
#if defined(TESSEL_BACKEND_CUDA)
    tessel::cublas::Handle h(s.handle());
#endif
    auto body = [&] {
        if (impl == Impl::tessel) {
            tessel::launch(kernel, Tile::grid(n, n), Tile::block(), Tile::smem_bytes(), s, n, n, n, a.data(), n, std::int64_t(0),
                           b.data(), n, std::int64_t(0), c.data(), n, std::int64_t(0), 1,
                           tessel::kernels::GemmEpilogue<float, __nv_bfloat16>{});
        } else {
#if defined(TESSEL_BACKEND_CUDA)
            // Row-major C = A B is column-major C^T = B^T A^T: cuBLAS takes B first.
            const float one = 1.f, zero = 0.f;
            TESSEL_CUBLAS_CHECK(cublasGemmEx(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b.data(), CUDA_R_16BF, n, a.data(),
                                             CUDA_R_16BF, n, &zero, c.data(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                             CUBLAS_GEMM_DEFAULT));
#endif
        }
    };
    tessel::bench::time_region(state, s, body);
    tessel::bench::report_flops(state, 2.0 * double(n) * n * n, tessel::bench::ceilings().bf16_tflops);
    tessel::bench::report_error(state, tessel::bench::sampled_matmul_error(a, b, c), 0x1p-8 + n * 0x1p-24);  // output rounding + the accumulation bound
    state.SetLabel(std::string(impl == Impl::tessel ? "tessel mma_matmul 128x128x32/4" : "cublasGemmEx") + ", bf16 " +
                   std::to_string(n) + "^3");
}

// fp32: simt_matmul<128 x 128 x 8, 8 x 8 per thread, 16-byte loads> or cublasSgemm.
void BM_matmul_f32(benchmark::State& state, Impl impl, int n) {
    using Tile = tessel::kernels::SimtTile<float, 128, 128, 8, 8, 8>;
    auto a = tessel::bench::random_tensor<float>({n, n}, 3);
    auto b = tessel::bench::random_tensor<float>({n, n}, 4);
    auto c = tessel::empty<float>({n, n});
    tessel::Stream s = tessel::current_stream();
#if defined(TESSEL_BACKEND_CUDA)
    tessel::cublas::Handle h(s.handle());
#endif
    auto body = [&] {
        if (impl == Impl::tessel) {
            tessel::launch(tessel::kernels::simt_matmul<float, Tile, true>, Tile::grid(n, n), Tile::block(), 0, s, n, n, n, a.data(), n,
                           std::int64_t(0), b.data(), n, std::int64_t(0), c.data(), n, std::int64_t(0), 1,
                           tessel::kernels::GemmEpilogue<float, float>{});
        } else {
#if defined(TESSEL_BACKEND_CUDA)
            const float one = 1.f, zero = 0.f;
            TESSEL_CUBLAS_CHECK(cublasSgemm(h.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b.data(), n, a.data(), n, &zero,
                                            c.data(), n));
#endif
        }
    };
    tessel::bench::time_region(state, s, body);
    tessel::bench::report_flops(state, 2.0 * double(n) * n * n, tessel::bench::ceilings().sgemm_tflops);
    tessel::bench::report_error(state, tessel::bench::sampled_matmul_error(a, b, c), n * 0x1p-24);  // fp32 accumulation's bound
    state.SetLabel(std::string(impl == Impl::tessel ? "tessel simt_matmul 128x128x8" : "cublasSgemm") + ", fp32 " +
                   std::to_string(n) + "^3");
}

const bool registered = [] {
    const std::vector<int> sizes = sim() ? std::vector<int>{256} : std::vector<int>{4096, 8192};
    for (int n : sizes) {
        const std::string tail = "/" + std::to_string(n);
        benchmark::RegisterBenchmark(("BM_matmul/tessel/bf16" + tail).c_str(), BM_matmul_bf16, Impl::tessel, n)->UseManualTime();
        benchmark::RegisterBenchmark(("BM_matmul/tessel/f32" + tail).c_str(), BM_matmul_f32, Impl::tessel, n)->UseManualTime();
#if defined(TESSEL_BACKEND_CUDA)
        benchmark::RegisterBenchmark(("BM_matmul/cublas/bf16" + tail).c_str(), BM_matmul_bf16, Impl::cublas, n)->UseManualTime();
        benchmark::RegisterBenchmark(("BM_matmul/cublas/f32" + tail).c_str(), BM_matmul_f32, Impl::cublas, n)->UseManualTime();
#endif
    }
    return true;
}();

}  // namespace
