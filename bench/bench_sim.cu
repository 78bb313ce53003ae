// Costs of the execution model, timed with events on whichever backend this is built for: on the
// sim they are the sim's own costs (fiber switch, launch, plain-loop thread, a 512^3 tiled matmul);
// on a GPU the same kernels give the GPU's figures.
//   bench_sim --benchmark_out=sim.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include "harness.hpp"

#include <tessel/kernels/tiled_matmul.cuh>
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

#include <cmath>
#include <vector>

namespace {

__global__ void barrier_loop(int rounds, int* sink) {
    int acc = 0;
    for (int r = 0; r < rounds; ++r) {
        acc += int(threadIdx.x) ^ r;
        __syncthreads();
    }
    if (acc == -1) *sink = acc;
}

__global__ void shuffle_loop(int rounds, int* sink) {
    int acc = int(threadIdx.x);
    for (int r = 0; r < rounds; ++r) acc += __shfl_xor_sync(0xffffffffu, acc, r & 31);
    if (acc == -1) *sink = acc;
}

__global__ void empty_kernel(int*) {}

__global__ void touch(int n, int* x) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] += 1;
}

// One launch of a block of state.range(0) threads running `kernel` for 200 rounds; `counter` is the
// time per thread per round.
void time_per_thread_round(benchmark::State& state, void (*kernel)(int, int*), const char* counter) {
    const int threads = int(state.range(0)), rounds = 200;
    int* sink = static_cast<int*>(tessel::rt::malloc_device(sizeof(int)));
    tessel::Stream stream = tessel::Stream::create();
    auto s = stream.handle();
    tessel::bench::time_region(state, stream, [&] { tessel::launch(kernel, 1, threads, 0, s, rounds, sink); });
    state.counters[counter] = benchmark::Counter(double(threads) * rounds * double(state.iterations()),
                                                 benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    tessel::rt::free_device(sink);
}

// One barrier per thread per round: time per (thread x barrier) is the cost of one fiber switch.
void BM_BarrierPerThread(benchmark::State& state) { time_per_thread_round(state, barrier_loop, "s_per_thread_barrier"); }
TESSEL_BENCHMARK(BM_BarrierPerThread)->Arg(32)->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);

// One warp shuffle per thread per round: the cost of a warp collective per lane (a fiber switch
// and the group's bookkeeping, which must not grow with the lanes that already wait).
void BM_ShufflePerThread(benchmark::State& state) { time_per_thread_round(state, shuffle_loop, "s_per_thread_shuffle"); }
TESSEL_BENCHMARK(BM_ShufflePerThread)->Arg(32)->Arg(256)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Launch to completion of an empty one-block kernel, host-timed: the launch path's latency.
void BM_LaunchLatency(benchmark::State& state) {
    int* sink = static_cast<int*>(tessel::rt::malloc_device(sizeof(int)));
    tessel::Stream stream = tessel::Stream::create();
    auto s = stream.handle();
    for (auto _ : state) {
        tessel::launch(empty_kernel, 1, 32, 0, s, sink);
        tessel::rt::stream_synchronize(s);
    }
    tessel::rt::free_device(sink);
}
TESSEL_BENCHMARK(BM_LaunchLatency)->Unit(benchmark::kMicrosecond);

// 100 back-to-back launches, event-timed: throughput of queued launches.
void BM_LaunchThroughput(benchmark::State& state) {
    int* sink = static_cast<int*>(tessel::rt::malloc_device(sizeof(int)));
    tessel::Stream stream = tessel::Stream::create();
    auto s = stream.handle();
    tessel::bench::time_region(state, stream, [&] {
        for (int i = 0; i < 100; ++i) tessel::launch(empty_kernel, 1, 32, 0, s, sink);
    });
    state.SetItemsProcessed(state.iterations() * 100);
    tessel::rt::free_device(sink);
}
TESSEL_BENCHMARK(BM_LaunchThroughput)->UseManualTime()->Unit(benchmark::kMicrosecond);

// A kernel with no barrier: on the sim each block runs as a plain loop (no per-thread fibers).
void BM_PlainLoopThreads(benchmark::State& state) {
    const int n = 1 << 22;
    int* x = static_cast<int*>(tessel::rt::malloc_device(n * sizeof(int)));
    tessel::Stream stream = tessel::Stream::create();
    auto s = stream.handle();
    tessel::bench::time_region(state, stream, [&] { tessel::launch(touch, tessel::blocks_for(n, 256), 256, 0, s, n, x); });
    state.SetItemsProcessed(state.iterations() * n);
    tessel::bench::report_bytes(state, 2.0 * n * sizeof(int));
    tessel::rt::free_device(x);
}
TESSEL_BENCHMARK(BM_PlainLoopThreads)->UseManualTime()->Unit(benchmark::kMillisecond);

// The 512x512x512 tiled shared-memory matmul (float).
void BM_TiledMatmul512(benchmark::State& state) {
    const int m = 512, n = 512, k = 512;
    using Tile = tessel::kernels::MatmulTile<64, 64, 16, 4, 4>;
    std::vector<float> h(std::size_t(m) * k, 0.5f);
    float* a = static_cast<float*>(tessel::rt::malloc_device(h.size() * sizeof(float)));
    float* b = static_cast<float*>(tessel::rt::malloc_device(h.size() * sizeof(float)));
    float* c = static_cast<float*>(tessel::rt::malloc_device(h.size() * sizeof(float)));
    tessel::rt::memcpy(a, h.data(), h.size() * sizeof(float));
    tessel::rt::memcpy(b, h.data(), h.size() * sizeof(float));
    tessel::Stream stream = tessel::Stream::create();
    auto s = stream.handle();
    tessel::bench::time_region(state, stream, [&] {
        tessel::launch(tessel::kernels::tiled_matmul<float, float, Tile>, Tile::grid(m, n), Tile::block(), 0, s, m, n, k,
                       1.f, a, k, b, n, 0.f, c, n);
    }, {.flush_l2 = true});  // 3 MiB of operands would otherwise sit in L2
    tessel::bench::report_flops(state, 2.0 * m * n * k, tessel::bench::ceilings().sgemm_tflops);
    state.counters["bytes_per_iter"] = double(m * k + k * n + m * n) * sizeof(float);  // each operand once: the roofline's bytes
    float corner = 0;  // all inputs are 0.5: every output is exactly 0.25 * k
    tessel::rt::memcpy(&corner, c + std::size_t(m) * n - 1, sizeof(float));
    tessel::bench::report_error(state, std::fabs(double(corner) - 0.25 * k) / (0.25 * k), 1e-6);
    for (float* p : {a, b, c}) tessel::rt::free_device(p);
}
TESSEL_BENCHMARK(BM_TiledMatmul512)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

