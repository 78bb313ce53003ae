// softmax, log_softmax, rms_norm and layer_norm over rows of 1k, 4k, 32k and 262k fp32 values (256 MiB per tensor on a GPU,
// 4 MiB on the sim), softmax and layer_norm of bf16 rows of 1k (the warp path) and 32k, and softmax
// of bf16 rows of 777 and 50257 (not a multiple of 16 bytes), as GB/s
// (read + write) and % of the device copy bandwidth measured in the same run. The sim's figures are
// CPU times of a smoke test.
#include <benchmark/benchmark.h>

#include "harness.hpp"
#include "inputs.hpp"

#include <tessel/ops/rows.hpp>

#include <cmath>
#include <type_traits>
#include <vector>

namespace {

using tessel::Tensor;

// kind 0: softmax, 1: rms_norm, 2: log_softmax, 3: layer_norm; state.range(0) = row length; T:
// float or bf16 (statistics in float either way; the reference reads the bf16 inputs).
template <class T>
void BM_rows(benchmark::State& state, int kind) {
    const std::int64_t cols = state.range(0);
    const std::int64_t total = tessel::backend == tessel::Backend::sim ? (std::int64_t(1) << 20) : (std::int64_t(1) << 26);
    const std::int64_t rows = std::max<std::int64_t>(1, total / cols);
    auto x = tessel::bench::random_tensor<T>({rows, cols}, 7, -4, 4);
    auto w = tessel::full<T>({cols}, tessel::ops::cast<T>(1.5)), b = tessel::full<T>({cols}, tessel::ops::cast<T>(0.25));
    Tensor<T> y;
    tessel::Stream s = tessel::current_stream();
    tessel::bench::time_region(state, s, [&] {
        switch (kind) {
            case 0: y = tessel::softmax(x, -1, s.handle()); break;
            case 1: y = tessel::rms_norm(x, w, 1e-6, s.handle()); break;
            case 2: y = tessel::log_softmax(x, -1, s.handle()); break;
            default: y = tessel::layer_norm(x, w, b, 1e-5, s.handle()); break;
        }
    });
    tessel::bench::report_bytes(state, 2.0 * double(sizeof(T)) * double(rows * cols));
    // Check the first row against a double reference (only that row comes back: a whole 1 GiB
    // input would cost a download each time Google Benchmark reruns the function).
    const auto xt = x.select(0, 0).to_vector(), yt = y.select(0, 0).to_vector();
    std::vector<double> xv, yv;
    for (std::int64_t k = 0; k < cols; ++k) {
        xv.push_back(tessel::ops::cast<double>(xt[std::size_t(k)]));
        yv.push_back(tessel::ops::cast<double>(yt[std::size_t(k)]));
    }
    double worst = 0, m = -1e300;
    long double sum = 0, sq = 0, row_total = 0;
    for (std::int64_t k = 0; k < cols; ++k) m = std::max(m, double(xv[std::size_t(k)]));
    for (std::int64_t k = 0; k < cols; ++k) {
        const long double x0 = xv[std::size_t(k)];
        sum += std::exp(double(x0) - m), sq += x0 * x0, row_total += x0;
    }
    const double mean = double(row_total / cols), var = double(sq / cols) - mean * mean;
    for (std::int64_t k = 0; k < cols; ++k) {
        const double x0 = xv[std::size_t(k)];
        const double want = kind == 0   ? std::exp(x0 - m) / double(sum)
                            : kind == 1 ? 1.5 * x0 / std::sqrt(double(sq / cols) + 1e-6)
                            : kind == 2 ? x0 - m - std::log(double(sum))
                                        : (x0 - mean) / std::sqrt(var + 1e-5) * 1.5 + 0.25;
        // log_softmax and layer_norm outputs cross zero: their error is relative to max(|want|, 1),
        // the scale of the terms that cancel (x - max, x - mean are O(1) here).
        const double scale = kind >= 2 ? std::max(std::fabs(want), 1.0) : std::max(std::fabs(want), 1e-30);
        worst = std::max(worst, std::fabs(double(yv[std::size_t(k)]) - want) / scale);
    }
    // bf16 outputs: one rounding to 8 significant bits, up to 2^-8 relative just above a power of
    // two (3.86e-3 seen on the sim), so 2^-7.
    tessel::bench::report_error(state, worst, std::is_same_v<T, float> ? 1e-4 : 1.0 / 128);
    state.SetLabel(std::to_string(rows) + " rows of " + std::to_string(cols));
}

const bool registered = [] {
    for (std::int64_t cols : {1024, 4096, 32768, 262144}) {
        benchmark::RegisterBenchmark("BM_softmax", tessel::bench::guarded(BM_rows<float>), 0)->Arg(cols)->UseManualTime();
        benchmark::RegisterBenchmark("BM_rms_norm", tessel::bench::guarded(BM_rows<float>), 1)->Arg(cols)->UseManualTime();
        benchmark::RegisterBenchmark("BM_log_softmax", tessel::bench::guarded(BM_rows<float>), 2)->Arg(cols)->UseManualTime();
        benchmark::RegisterBenchmark("BM_layer_norm", tessel::bench::guarded(BM_rows<float>), 3)->Arg(cols)->UseManualTime();
    }
    for (std::int64_t cols : {1024, 32768}) {
        benchmark::RegisterBenchmark("BM_softmax_bf16", tessel::bench::guarded(BM_rows<__nv_bfloat16>), 0)->Arg(cols)->UseManualTime();
        benchmark::RegisterBenchmark("BM_layer_norm_bf16", tessel::bench::guarded(BM_rows<__nv_bfloat16>), 3)->Arg(cols)->UseManualTime();
    }
    // Rows that are not a multiple of 16 bytes: attention scores over 777 positions (the warp path
    // with the rows' ends one per lane) and a vocabulary of 50257 (a block per row).
    for (std::int64_t cols : {777, 50257})
        benchmark::RegisterBenchmark("BM_softmax_bf16", tessel::bench::guarded(BM_rows<__nv_bfloat16>), 0)->Arg(cols)->UseManualTime();
    return true;
}();

}  // namespace
