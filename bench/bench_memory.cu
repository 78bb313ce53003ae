// Allocator costs, host time: a cached allocate+deallocate pair by size against the runtime's own
// cudaMalloc+cudaFree, and a churn of random sizes on several streams reporting time per operation
// and fragmentation (peak reserved over peak allocated).
//   bench_memory --benchmark_out=memory.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include "harness.hpp"

#include <tessel/memory/allocator.hpp>
#include <tessel/memory/caching_allocator.hpp>  // the allocators themselves
#include <tessel/memory/host_allocator.hpp>

#include <random>
#include <vector>

namespace mem = tessel::memory;

namespace {

void BM_CachedPair(benchmark::State& state) {
    const std::size_t bytes = std::size_t(state.range(0));
    mem::deallocate(mem::allocate(bytes));  // warm the cache
    for (auto _ : state) {
        void* p = mem::allocate(bytes);
        benchmark::DoNotOptimize(p);
        mem::deallocate(p);
    }
    state.SetLabel(mem::backend() == mem::Backend::async ? "cudaMallocAsync backend" : "native caching allocator");
}
TESSEL_BENCHMARK(BM_CachedPair)->RangeMultiplier(16)->Range(512, 256 << 20);

void BM_RuntimePair(benchmark::State& state) {
    const std::size_t bytes = std::size_t(state.range(0));
    for (auto _ : state) {
        void* p = tessel::rt::malloc_device(bytes);
        benchmark::DoNotOptimize(p);
        tessel::rt::free_device(p);
    }
    state.SetLabel(tessel::backend == tessel::Backend::sim ? "sim cudaMalloc+cudaFree" : "cudaMalloc+cudaFree");
}
TESSEL_BENCHMARK(BM_RuntimePair)->RangeMultiplier(16)->Range(512, 256 << 20);

void BM_PinnedCachedPair(benchmark::State& state) {
    const std::size_t bytes = std::size_t(state.range(0));
    mem::deallocate_host(mem::allocate_host(bytes));
    for (auto _ : state) {
        void* p = mem::allocate_host(bytes);
        benchmark::DoNotOptimize(p);
        mem::deallocate_host(p);
    }
}
TESSEL_BENCHMARK(BM_PinnedCachedPair)->Arg(4096)->Arg(1 << 20)->Arg(64 << 20);

// Random sizes (log-uniform 512 B .. 32 MiB) on 4 streams, up to 64 live blocks.
void BM_Churn(benchmark::State& state) {
    std::vector<tessel::rt::stream_t> streams = {nullptr};
    for (int i = 0; i < 3; ++i) streams.push_back(tessel::rt::stream_create(true));
    std::mt19937_64 rng(42);
    std::uniform_real_distribution<double> e(9.0, 25.0);
    std::vector<void*> live;
    mem::empty_cache();
    mem::reset_peak_stats();
    std::int64_t ops = 0;
    for (auto _ : state) {
        if (live.size() < 64 && (live.empty() || rng() % 2)) {
            live.push_back(mem::allocate(std::size_t(std::exp2(e(rng))), streams[rng() % streams.size()]));
        } else {
            const std::size_t i = rng() % live.size();
            mem::deallocate(live[i]);
            live[i] = live.back();
            live.pop_back();
        }
        ++ops;
    }
    const auto s = mem::stats();
    for (void* p : live) mem::deallocate(p);
    state.counters["peak_reserved_over_peak_allocated"] =
        double(s.reserved_bytes[0].peak) / double(std::max<std::int64_t>(1, s.allocated_bytes[0].peak));
    state.counters["device_allocs"] = double(s.num_device_alloc);
    mem::empty_cache();
    for (std::size_t i = 1; i < streams.size(); ++i) tessel::rt::stream_destroy(streams[i]);
}
TESSEL_BENCHMARK(BM_Churn)->Iterations(200000);

}  // namespace

