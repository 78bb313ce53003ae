// The README's example, kept compiling and running (ctest: examples.readme). The part between the
// markers is the README's code block; after it, every element is checked against host arithmetic in
// double ("0 of N elements wrong").
#include <tessel/tessel.hpp>
#include <tessel/ops/matmul.hpp>  // matmul, linear: not in tessel.hpp (it brings in cuBLAS)

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

// README begin
__global__ void halve(float* x, std::int64_t n) {  // plain CUDA C++: runs on the GPU and on the sim
    const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 0.5f;
}

int main() try {
    using namespace tessel;
    using bf16 = __nv_bfloat16;
    // README end
    if (!is_available()) return std::printf("SKIPPED: %s\n", unavailable_reason().c_str()), 77;
    // README begin
    Philox rng(2026);
    auto x = rng.uniform<float>({300, 200}, -1, 1);        // device memory, from the caching allocator
    auto w = rng.uniform<float>({100, 200}, -1, 1).to<bf16>();
    auto b = rng.uniform<float>({100}, -1, 1).to<bf16>();  // conversions: one kernel each
    auto h = linear(x.to<bf16>(), w, b, Activation::gelu);  // gelu(x @ w^T + b) on tensor cores
    auto p = softmax(h.to<float>(), -1);                    // each row read once
    Tensor<float> y = 2 * p + 1;                            // one fused kernel
    launch(halve, blocks_for(y.numel(), 256), 256, 0, current_stream(), y.data(), y.numel());  // checked
    std::printf("sum(y) = %.2f\n", double(sum(y).item()));  // 15300: p + 0.5 over 300 rows of 100
    // item() waits for the stream: a fault in any kernel above would throw tessel::CudaError here
    // README end

    // The checks: h against gelu(x @ w^T + b) in double from the same bf16 inputs (the product is
    // accumulated in fp32 and rounded once to bf16: within 2^-8 of the result, plus the fp32 sum's
    // error, far below 1e-3 here); p against the softmax of the h the device computed, y = p + 0.5.
    const std::int64_t m = 300, n = 100, k = 200;
    const auto xs = x.to<bf16>().to_vector(), ws = w.to_vector(), bs = b.to_vector(), hs = h.to_vector();
    const auto ps = p.to_vector(), ys = y.to_vector();
    std::size_t wrong = 0;
    for (std::int64_t i = 0; i < m; ++i) {
        double row_max = -INFINITY, row_sum = 0;
        for (std::int64_t j = 0; j < n; ++j) row_max = std::max(row_max, double(float(hs[std::size_t(i * n + j)])));
        for (std::int64_t j = 0; j < n; ++j) row_sum += std::exp(double(float(hs[std::size_t(i * n + j)])) - row_max);
        for (std::int64_t j = 0; j < n; ++j) {
            const auto at = std::size_t(i * n + j);
            double acc = double(float(bs[std::size_t(j)]));
            for (std::int64_t l = 0; l < k; ++l) acc += double(float(xs[std::size_t(i * k + l)])) * double(float(ws[std::size_t(j * k + l)]));
            const double gelu = 0.5 * acc * (1 + std::erf(acc / std::sqrt(2.0)));
            const double softmax = std::exp(double(float(hs[at])) - row_max) / row_sum;
            wrong += !(std::fabs(double(float(hs[at])) - gelu) <= 0x1p-8 * std::fabs(gelu) + 1e-3);
            wrong += !(std::fabs(ps[at] - softmax) <= 1e-6 * softmax + 1e-9);
            wrong += !(std::fabs(ys[at] - (softmax + 0.5)) <= 1e-6);
        }
    }
    std::printf("readme example: %zu of %lld elements wrong\n", wrong, static_cast<long long>(m * n));
    return wrong == 0 ? 0 : 1;
    // README begin
} catch (const tessel::Error& e) {  // bad input, out of memory, a CUDA error: the message says which
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
}
