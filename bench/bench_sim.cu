// Costs of the execution model, timed with events on whichever backend this is built for: on the
// sim they are the sim's own costs (fiber switch, launch, plain-loop thread, a 512^3 tiled matmul);
// on a GPU the same kernels give the GPU's figures.
//   bench_sim --benchmark_out=sim.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include "bench_main.hpp"

#include <tessel/kernels/tiled_matmul.cuh>
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

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

__global__ void empty_kernel(int*) {}

__global__ void touch(int n, int* x) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] += 1;
}

// Times `body` (which queues work on `s`) with events, as manual time per iteration.
template <class F>
void time_with_events(benchmark::State& state, tessel::rt::stream_t s, F&& body) {
    auto start = tessel::rt::event_create(), stop = tessel::rt::event_create();
    body();  // warm-up: first launch pays one-time costs (stack pools, module load)
    tessel::rt::stream_synchronize(s);
    for (auto _ : state) {
        tessel::rt::event_record(start, s);
        body();
        tessel::rt::event_record(stop, s);
        tessel::rt::event_synchronize(stop);
        state.SetIterationTime(double(tessel::rt::event_elapsed_ms(start, stop)) / 1e3);
    }
    tessel::rt::event_destroy(start);
    tessel::rt::event_destroy(stop);
}

// One barrier per thread per round: time per (thread x barrier) is the cost of one fiber switch.
void BM_BarrierPerThread(benchmark::State& state) {
    const int threads = int(state.range(0)), rounds = 200;
    int* sink = static_cast<int*>(tessel::rt::malloc_device(sizeof(int)));
    auto s = tessel::rt::stream_create(true);
    time_with_events(state, s, [&] { tessel::launch(barrier_loop, 1, threads, 0, s, rounds, sink); });
    state.counters["s_per_thread_barrier"] = benchmark::Counter(
        double(threads) * rounds * double(state.iterations()), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    tessel::rt::stream_destroy(s);
    tessel::rt::free_device(sink);
}
BENCHMARK(BM_BarrierPerThread)->Arg(32)->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Launch to completion of an empty one-block kernel, host-timed: the launch path's latency.
void BM_LaunchLatency(benchmark::State& state) {
    int* sink = static_cast<int*>(tessel::rt::malloc_device(sizeof(int)));
    auto s = tessel::rt::stream_create(true);
    for (auto _ : state) {
        tessel::launch(empty_kernel, 1, 32, 0, s, sink);
        tessel::rt::stream_synchronize(s);
    }
    tessel::rt::stream_destroy(s);
    tessel::rt::free_device(sink);
}
BENCHMARK(BM_LaunchLatency)->Unit(benchmark::kMicrosecond);

// 100 back-to-back launches, event-timed: throughput of queued launches.
void BM_LaunchThroughput(benchmark::State& state) {
    int* sink = static_cast<int*>(tessel::rt::malloc_device(sizeof(int)));
    auto s = tessel::rt::stream_create(true);
    time_with_events(state, s, [&] {
        for (int i = 0; i < 100; ++i) tessel::launch(empty_kernel, 1, 32, 0, s, sink);
    });
    state.SetItemsProcessed(state.iterations() * 100);
    tessel::rt::stream_destroy(s);
    tessel::rt::free_device(sink);
}
BENCHMARK(BM_LaunchThroughput)->UseManualTime()->Unit(benchmark::kMicrosecond);

// A kernel with no barrier: on the sim each block runs as a plain loop (no per-thread fibers).
void BM_PlainLoopThreads(benchmark::State& state) {
    const int n = 1 << 22;
    int* x = static_cast<int*>(tessel::rt::malloc_device(n * sizeof(int)));
    auto s = tessel::rt::stream_create(true);
    time_with_events(state, s, [&] { tessel::launch(touch, tessel::blocks_for(n, 256), 256, 0, s, n, x); });
    state.SetItemsProcessed(state.iterations() * n);
    tessel::rt::stream_destroy(s);
    tessel::rt::free_device(x);
}
BENCHMARK(BM_PlainLoopThreads)->UseManualTime()->Unit(benchmark::kMillisecond);

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
    auto s = tessel::rt::stream_create(true);
    time_with_events(state, s, [&] {
        tessel::launch(tessel::kernels::tiled_matmul<float, float, Tile>, Tile::grid(m, n), Tile::block(), 0, s, m, n, k,
                       1.f, a, k, b, n, 0.f, c, n);
    });
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * n * k * double(state.iterations()) / 1e9,
                                                   benchmark::Counter::kIsRate);
    tessel::rt::stream_destroy(s);
    for (float* p : {a, b, c}) tessel::rt::free_device(p);
}
BENCHMARK(BM_TiledMatmul512)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

TESSEL_BENCHMARK_MAIN()
