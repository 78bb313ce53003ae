// Sorting: tessel::sort of the rows of a 4096 x 4096 fp32 matrix (ascending, stable, with each
// element's original position) against the CUB call it makes, cub::DeviceSegmentedRadixSort::
// SortPairs on the same rows, so that the difference is tessel's own work (the positions' iota,
// the row offsets, the scratch). Bytes: keys read and written, positions written (16 per element).
// The sim sorts 64 x 1024 with the C++ library, a smoke test whose times are CPU times.
#include <benchmark/benchmark.h>

#include "harness.hpp"
#include "inputs.hpp"

#include <tessel/ops/sort.hpp>

#if defined(TESSEL_BACKEND_CUDA)
#include <cub/device/device_segmented_radix_sort.cuh>
#endif

#include <algorithm>
#include <numeric>
#include <span>
#include <vector>

namespace {

using tessel::Tensor;

// impl 0: tessel::sort along the last axis, 1: CUB DeviceSegmentedRadixSort::SortPairs (CUDA build only).
void BM_sort(benchmark::State& state, int impl) {
    const bool sim = tessel::backend == tessel::Backend::sim;
    const std::int64_t rows = sim ? 64 : 4096, cols = sim ? 1024 : 4096, n = rows * cols;
    auto x = tessel::bench::random_tensor<float>({rows, cols}, 11, -1000, 1000);
    tessel::Stream s = tessel::current_stream();
    Tensor<float> keys = tessel::empty<float>({rows, cols});
    Tensor<std::int64_t> positions = tessel::empty<std::int64_t>({rows, cols});
#if defined(TESSEL_BACKEND_CUDA)
    std::vector<std::int64_t> iota_host(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) iota_host[std::size_t(i)] = i % cols;
    const auto iota = tessel::from_host<std::int64_t>(std::span<const std::int64_t>(iota_host), {rows, cols});
    std::vector<int> off(static_cast<std::size_t>(rows + 1));
    for (std::size_t r = 0; r < off.size(); ++r) off[r] = int(std::int64_t(r) * cols);
    const auto offsets = tessel::from_host<int>(std::span<const int>(off), {rows + 1});
    std::size_t temp_bytes = 0;
    auto cub_sort = [&](void* temp) {
        return cub::DeviceSegmentedRadixSort::SortPairs(temp, temp_bytes, x.data(), keys.data(), iota.data(), positions.data(), int(n),
                                                        int(rows), offsets.data(), offsets.data() + 1, 0, 32, s.handle());
    };
    TESSEL_CUDA_CHECK(cub_sort(nullptr));
    void* temp = tessel::memory::allocate(temp_bytes, s.handle());
#endif
    auto body = [&] {
        if (impl == 0) {
            auto sorted = tessel::sort(x, -1, false, s.handle());
            keys = sorted.values;
            positions = sorted.indices;
        } else {
#if defined(TESSEL_BACKEND_CUDA)
            TESSEL_CUDA_CHECK(cub_sort(temp));
#endif
        }
    };
    tessel::bench::time_region(state, s, body);
    tessel::bench::report_bytes(state, 16.0 * double(n));
    // The first and last rows against std::stable_sort of the same values.
    tessel::bench::check_result(state, [&] {
        const auto xv = x.to_vector(), kv = keys.to_vector();
        const auto pv = positions.to_vector();
        std::size_t wrong = 0;
        for (std::int64_t r : {std::int64_t(0), rows - 1}) {
            std::vector<float> want(xv.begin() + r * cols, xv.begin() + (r + 1) * cols);
            std::stable_sort(want.begin(), want.end());
            for (std::int64_t c = 0; c < cols; ++c) {
                const std::size_t at = std::size_t(r * cols + c);
                wrong += kv[at] != want[std::size_t(c)] || xv[std::size_t(r * cols + pv[at])] != kv[at];
            }
        }
        return double(wrong) / double(2 * cols);
    }, 0);
    state.SetLabel(std::string(impl == 0 ? "tessel::sort" : "CUB DeviceSegmentedRadixSort::SortPairs") + ", " + std::to_string(rows) +
                   " rows of " + std::to_string(cols) + " floats");
#if defined(TESSEL_BACKEND_CUDA)
    tessel::memory::deallocate(temp);
#endif
}

// Registered by name: the implementation is the second component, so the report pairs tessel with CUB.
const bool registered = [] {
    benchmark::RegisterBenchmark("BM_sort/tessel/f32", tessel::bench::guarded(BM_sort), 0)->UseManualTime();
#if defined(TESSEL_BACKEND_CUDA)
    benchmark::RegisterBenchmark("BM_sort/cub/f32", tessel::bench::guarded(BM_sort), 1)->UseManualTime();
#endif
    return true;
}();

}  // namespace
