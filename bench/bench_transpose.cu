// Transpose: contiguous() of the transposed view of a 16384 x 16384 fp32 matrix (1 GiB moved: read
// plus write) against cuBLAS's geam (C = A^T), as GB/s and % of the device copy bandwidth measured
// in the same run; and a batched permute (0, 2, 1) of 64 x 1024 x 1024. The sim runs 1024 x 1024
// as a smoke test whose times are CPU times.
#include <benchmark/benchmark.h>

#include "harness.hpp"
#include "inputs.hpp"

#include <tessel/ops/copy.hpp>


namespace {

using tessel::Tensor;

bool sim() { return tessel::backend == tessel::Backend::sim; }

// Largest |out[j, i] - in[i, j]| over a sample (a transpose is exact: any difference is an error).
double sampled_mismatch(const Tensor<float>& in, const Tensor<float>& out) {
    const auto a = in.to_vector(), b = out.to_vector();
    const std::int64_t rows = in.size(-2), cols = in.size(-1), batch = in.numel() / (rows * cols);
    double worst = 0;
    for (std::int64_t k = 0; k < 4096; ++k) {
        const std::int64_t z = (k * 7) % batch, i = (k * 7919) % rows, j = (k * 104729) % cols;
        worst = std::max(worst, double(std::fabs(a[std::size_t((z * rows + i) * cols + j)] - b[std::size_t((z * cols + j) * rows + i)])));
    }
    return worst;
}

// impl 0: tessel contiguous(), 1: cublasSgeam (CUDA build only).
void BM_transpose(benchmark::State& state, int impl) {
    const std::int64_t n = sim() ? 1024 : 16384;
    auto x = tessel::bench::random_tensor<float>({n, n}, 1);
    auto y = tessel::empty<float>({n, n});
    tessel::Stream s = tessel::current_stream();
#if defined(TESSEL_BACKEND_CUDA)
    tessel::cublas::Handle h(s.handle());
#endif
    auto body = [&] {
        if (impl == 0) {
            y = x.transpose(0, 1).to(tessel::TensorOptions{.stream = s.handle(), .non_blocking = true});
        } else {
#if defined(TESSEL_BACKEND_CUDA)
            const float one = 1.f, zero = 0.f;
            TESSEL_CUBLAS_CHECK(cublasSgeam(h.get(), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(n), &one, x.data(), int(n), &zero,
                                            y.data(), int(n), y.data(), int(n)));
#endif
        }
    };
    tessel::bench::time_region(state, s, body);
    tessel::bench::report_bytes(state, 2.0 * 4.0 * double(n * n));
    tessel::bench::check_result(state, [&] { return sampled_mismatch(x, y); }, 0.0);
    state.SetLabel(std::string(impl == 0 ? "tessel contiguous()" : "cublasSgeam") + ", " + std::to_string(n) + "^2 floats");
}

void BM_batched_permute(benchmark::State& state) {
    const std::int64_t b = sim() ? 4 : 64, n = sim() ? 256 : 1024;
    auto x = tessel::bench::random_tensor<float>({b, n, n}, 2);
    Tensor<float> y;
    tessel::Stream s = tessel::current_stream();
    tessel::bench::time_region(state, s, [&] { y = x.permute({0, 2, 1}).to(tessel::TensorOptions{.stream = s.handle(), .non_blocking = true}); });
    tessel::bench::report_bytes(state, 2.0 * 4.0 * double(b * n * n));
    tessel::bench::check_result(state, [&] { return sampled_mismatch(x, y); }, 0.0);
}

const bool registered = [] {
    benchmark::RegisterBenchmark("BM_transpose/tessel/f32", tessel::bench::guarded(BM_transpose), 0)->UseManualTime();
#if defined(TESSEL_BACKEND_CUDA)
    benchmark::RegisterBenchmark("BM_transpose/cublas/f32", tessel::bench::guarded(BM_transpose), 1)->UseManualTime();
#endif
    benchmark::RegisterBenchmark("BM_batched_permute", tessel::bench::guarded(BM_batched_permute))->UseManualTime();
    return true;
}();

}  // namespace
