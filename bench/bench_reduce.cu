// Reductions: the full fp32 sum of 2^28 elements (1 GiB) against CUB's DeviceReduce::Sum, row
// sums of a 16384 x 16384 fp32 matrix against CUB's DeviceSegmentedReduce::Sum, column sums of the
// same matrix (the column kernel), and a fused dot product sum(a * b) of 2 x 2^27 floats against
// cublasSdot, as GB/s and % of the device copy bandwidth (bytes read only: a reduction writes almost
// nothing). The sim runs 2^20 elements and 256 x 4096, a smoke test whose times are CPU times.
#include <benchmark/benchmark.h>

#include "harness.hpp"
#include "inputs.hpp"

#include <tessel/ops/reduce.hpp>

#if defined(TESSEL_BACKEND_CUDA)
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_reduce.cuh>
#endif

#include <cmath>

namespace {

using tessel::Tensor;

bool sim() { return tessel::backend == tessel::Backend::sim; }

// Largest relative error over about 64 sampled outputs of a sum: output o adds v[o * o_stride + k * k_stride]
// for k < K (checked against a long-double sum, relative to the sum of magnitudes).
double sampled_sum_error(const std::vector<float>& v, const std::vector<float>& got, std::int64_t outputs, std::int64_t K,
                         std::int64_t o_stride, std::int64_t k_stride) {
    double worst = 0;
    for (std::int64_t o = 0; o < outputs; o += std::max<std::int64_t>(1, outputs / 64)) {
        long double want = 0, mag = 0;
        for (std::int64_t k = 0; k < K; ++k) {
            want += v[std::size_t(o * o_stride + k * k_stride)];
            mag += std::fabs(v[std::size_t(o * o_stride + k * k_stride)]);
        }
        worst = std::max(worst, double(std::fabs(got[std::size_t(o)] - want) / mag));
    }
    return worst;
}

// |got - sum(a[i] * b[i])| / sum|a[i] * b[i]| (b empty: the sum of a), accumulated in long double on
// the host. A named host function: a lambda holding long double would be a constexpr candidate
// for device code under --expt-relaxed-constexpr, where nvcc warns that long double is double.
double whole_sum_error(const std::vector<float>& a, const std::vector<float>& b, float got) {
    long double want = 0, mag = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const long double term = b.empty() ? (long double)a[i] : (long double)a[i] * b[i];
        want += term;
        mag += std::fabs(term);
    }
    return double(std::fabs(got - want) / mag);
}

// impl 0: tessel::sum, 1: CUB DeviceReduce::Sum (CUDA build only).
void BM_sum(benchmark::State& state, int impl) {
    const std::int64_t n = sim() ? (std::int64_t(1) << 20) : (std::int64_t(1) << 28);
    auto x = tessel::bench::random_tensor<float>({n}, 1);
    auto out = tessel::empty<float>({});
    tessel::Stream s = tessel::current_stream();
    [[maybe_unused]] void* temp = nullptr;
    [[maybe_unused]] std::size_t temp_bytes = 0;
#if defined(TESSEL_BACKEND_CUDA)
    TESSEL_CUDA_CHECK(cub::DeviceReduce::Sum(nullptr, temp_bytes, x.data(), out.data(), n, s.handle()));
    temp = tessel::memory::allocate(temp_bytes, s.handle());
#endif
    auto body = [&] {
        if (impl == 0) {
            out = tessel::sum(x, {}, false, s.handle());
        } else {
#if defined(TESSEL_BACKEND_CUDA)
            TESSEL_CUDA_CHECK(cub::DeviceReduce::Sum(temp, temp_bytes, x.data(), out.data(), n, s.handle()));
#endif
        }
    };
    tessel::bench::time_region(state, s, body);
    tessel::bench::report_bytes(state, 4.0 * double(n));
    tessel::bench::check_result(state, [&] { return whole_sum_error(x.to_vector(), {}, out.item()); }, 1e-6);
    state.SetLabel(std::string(impl == 0 ? "tessel" : "CUB DeviceReduce::Sum") + ", " + std::to_string(n) + " floats");
    if (temp) tessel::memory::deallocate(temp);
}

// Row sums: impl 0: tessel::sum over axis 1, 1: CUB DeviceSegmentedReduce::Sum.
void BM_row_sum(benchmark::State& state, int impl) {
    const std::int64_t rows = sim() ? 256 : 16384, cols = sim() ? 4096 : 16384;
    auto x = tessel::bench::random_tensor<float>({rows, cols}, 2);
    auto out = tessel::empty<float>({rows});
    tessel::Stream s = tessel::current_stream();
    [[maybe_unused]] void* temp = nullptr;
    [[maybe_unused]] std::size_t temp_bytes = 0;
    [[maybe_unused]] Tensor<std::int32_t> offsets;
#if defined(TESSEL_BACKEND_CUDA)
    std::vector<std::int32_t> off(static_cast<std::size_t>(rows + 1));
    for (std::size_t i = 0; i < off.size(); ++i) off[i] = std::int32_t(i * std::size_t(cols));
    offsets = tessel::from_host<std::int32_t>(std::span<const std::int32_t>(off), {rows + 1});
    TESSEL_CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(nullptr, temp_bytes, x.data(), out.data(), int(rows), offsets.data(),
                                                      offsets.data() + 1, s.handle()));
    temp = tessel::memory::allocate(temp_bytes, s.handle());
#endif
    auto body = [&] {
        if (impl == 0) {
            out = tessel::sum(x, {1}, false, s.handle());
        } else {
#if defined(TESSEL_BACKEND_CUDA)
            TESSEL_CUDA_CHECK(cub::DeviceSegmentedReduce::Sum(temp, temp_bytes, x.data(), out.data(), int(rows), offsets.data(),
                                                              offsets.data() + 1, s.handle()));
#endif
        }
    };
    tessel::bench::time_region(state, s, body);
    tessel::bench::report_bytes(state, 4.0 * double(rows * cols));
    tessel::bench::check_result(state, [&] { return sampled_sum_error(x.to_vector(), out.to_vector(), rows, cols, cols, 1); }, 1e-6);
    state.SetLabel(std::string(impl == 0 ? "tessel" : "CUB DeviceSegmentedReduce::Sum") + ", " + std::to_string(rows) + " x " +
                   std::to_string(cols) + " floats");
    if (temp) tessel::memory::deallocate(temp);
}

// Column sums: tessel::sum over axis 0 (32 neighbouring columns per block, coalesced reads).
void BM_col_sum(benchmark::State& state) {
    const std::int64_t rows = sim() ? 4096 : 16384, cols = sim() ? 256 : 16384;
    auto x = tessel::bench::random_tensor<float>({rows, cols}, 3);
    auto out = tessel::empty<float>({cols});
    tessel::Stream s = tessel::current_stream();
    tessel::bench::time_region(state, s, [&] { out = tessel::sum(x, {0}, false, s.handle()); });
    tessel::bench::report_bytes(state, 4.0 * double(rows * cols));
    tessel::bench::check_result(state, [&] { return sampled_sum_error(x.to_vector(), out.to_vector(), cols, rows, 1, cols); }, 1e-6);
    state.SetLabel("tessel, " + std::to_string(rows) + " x " + std::to_string(cols) + " floats over axis 0");
}

// Dot product: impl 0: tessel::sum(a * b), one fused kernel (plus the ordered combination of the
// splits); 1: cublasSdot with the result left on the device.
void BM_dot(benchmark::State& state, int impl) {
    const std::int64_t n = sim() ? (std::int64_t(1) << 20) : (std::int64_t(1) << 27);
    auto a = tessel::bench::random_tensor<float>({n}, 4), b = tessel::bench::random_tensor<float>({n}, 5);
    auto out = tessel::empty<float>({});
    tessel::Stream s = tessel::current_stream();
#if defined(TESSEL_BACKEND_CUDA)
    tessel::cublas::Handle h(s.handle());
    TESSEL_CUBLAS_CHECK(cublasSetPointerMode(h.get(), CUBLAS_POINTER_MODE_DEVICE));
#endif
    auto body = [&] {
        if (impl == 0) {
            out = tessel::sum(a * b, {}, false, s.handle());
        } else {
#if defined(TESSEL_BACKEND_CUDA)
            TESSEL_CUBLAS_CHECK(cublasSdot(h.get(), int(n), a.data(), 1, b.data(), 1, out.data()));
#endif
        }
    };
    tessel::bench::time_region(state, s, body);
    tessel::bench::report_bytes(state, 8.0 * double(n));
    tessel::bench::check_result(state, [&] { return whole_sum_error(a.to_vector(), b.to_vector(), out.item()); }, 1e-6);
    state.SetLabel(std::string(impl == 0 ? "tessel sum(a * b)" : "cublasSdot") + ", " + std::to_string(n) + " floats each");
}

// Registered by name: the implementation is the second component, so the report pairs tessel with CUB.
const bool registered = [] {
    benchmark::RegisterBenchmark("BM_sum/tessel/f32", tessel::bench::guarded(BM_sum), 0)->UseManualTime();
    benchmark::RegisterBenchmark("BM_row_sum/tessel/f32", tessel::bench::guarded(BM_row_sum), 0)->UseManualTime();
    benchmark::RegisterBenchmark("BM_col_sum/tessel/f32", tessel::bench::guarded(BM_col_sum))->UseManualTime();
    benchmark::RegisterBenchmark("BM_dot/tessel/f32", tessel::bench::guarded(BM_dot), 0)->UseManualTime();
#if defined(TESSEL_BACKEND_CUDA)
    benchmark::RegisterBenchmark("BM_dot/cublas/f32", tessel::bench::guarded(BM_dot), 1)->UseManualTime();
    benchmark::RegisterBenchmark("BM_sum/cub/f32", tessel::bench::guarded(BM_sum), 1)->UseManualTime();
    benchmark::RegisterBenchmark("BM_row_sum/cub/f32", tessel::bench::guarded(BM_row_sum), 1)->UseManualTime();
#endif
    return true;
}();

}  // namespace
