// Copy/compute overlap: y = relu(2x + 1) over 32M floats in host memory, through the device in
// 4M-element chunks on 3 streams (uploads, kernels and downloads of different chunks overlap),
// against the same work done serially on one stream in one piece.
#include <tessel/core/env.hpp>
#include <tessel/kernels/elementwise.cuh>
#include <tessel/runtime/launch.hpp>
#include <tessel/stream/pipeline.hpp>

#include <chrono>
#include <cstdio>
#include <vector>

namespace {
struct Relu2xPlus1 {
    __host__ __device__ float operator()(float x) const {
        const float v = 2.f * x + 1.f;
        return v > 0.f ? v : 0.f;
    }
};
void compute(const float* in, float* out, std::size_t n, tessel::rt::stream_t s) {
    tessel::launch(tessel::kernels::map<Relu2xPlus1, float, float>, 264, 256, 0, s, n, Relu2xPlus1{}, out, in);
}
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

int main(int argc, char** argv) try {
    if (!tessel::is_available()) {
        std::printf("SKIPPED: %s\n", tessel::unavailable_reason().c_str());
        return 77;
    }
    // Elements to stream (default 2^25): digits only, 1 to 2^32 (a bad count is an error, not 0).
    const std::size_t n = argc > 1 ? std::size_t(tessel::env::parse_integer("overlap: the element count", argv[1], 1, std::uint64_t(1) << 32))
                                   : (std::size_t(1) << 25);
    std::vector<float> x(n), y(n, -1.f), serial(n, -1.f);
    for (std::size_t i = 0; i < n; ++i) x[i] = float(int(i % 2001) - 1000) * 0.001f;

    auto t0 = std::chrono::steady_clock::now();
    tessel::overlap_pipeline<float, float>(x, y, compute, {.chunk_elements = std::size_t(1) << 22, .streams = 3});
    const double overlapped = seconds_since(t0);

    t0 = std::chrono::steady_clock::now();
    tessel::overlap_pipeline<float, float>(x, serial, compute, {.chunk_elements = n, .streams = 1});
    const double one_piece = seconds_since(t0);

    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += y[i] != Relu2xPlus1{}(x[i]) || serial[i] != y[i];
    std::printf("overlap pipeline, %zu floats (%s backend): 3 streams x 4M chunks %.1f ms, one piece on one stream "
                "%.1f ms, %zu wrong\n", n, tessel::backend_name, overlapped * 1e3, one_piece * 1e3, wrong);
    return wrong == 0 ? 0 : 1;
} catch (const std::exception& e) {
    std::fprintf(stderr, "overlap: %s\n", e.what());
    return 1;
}
