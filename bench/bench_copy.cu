// Copy bandwidth between host and device, pageable against pinned memory, by size; and the overlap
// pipeline against the same work in one piece on one stream. Event-timed; GB/s counts the bytes
// copied once. On the sim these are CPU memcpy figures, never GPU ones.
#include <benchmark/benchmark.h>

#include "harness.hpp"

#include <tessel/kernels/elementwise.cuh>
#include <tessel/runtime/launch.hpp>
#include <tessel/stream/pipeline.hpp>

#include <vector>

namespace mem = tessel::memory;

namespace {

enum Direction { h2d, d2h };

template <bool Pinned>
void BM_Copy(benchmark::State& state) {
    const std::size_t bytes = std::size_t(state.range(0));
    const auto dir = Direction(state.range(1));
    std::vector<char> pageable(Pinned ? 0 : bytes, 1);
    char* host = Pinned ? static_cast<char*>(mem::allocate_host(bytes)) : pageable.data();
    void* dev = mem::allocate(bytes);
    tessel::Stream s = tessel::Stream::create();
    tessel::bench::time_region(state, s, [&] {
        if (dir == h2d) tessel::rt::memcpy_async(dev, host, bytes, s.handle());
        else tessel::rt::memcpy_async(host, dev, bytes, s.handle());
    });
    state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(bytes));
    const auto& c = tessel::bench::ceilings();
    tessel::bench::report_bytes(state, double(bytes), dir == h2d ? c.h2d_gbs : c.d2h_gbs);
    state.SetLabel(std::string(dir == h2d ? "H2D " : "D2H ") + (Pinned ? "pinned" : "pageable"));
    mem::deallocate(dev);
    if (Pinned) mem::deallocate_host(host);
}
TESSEL_BENCHMARK(BM_Copy<false>)->ArgsProduct({{1 << 16, 1 << 20, 1 << 24, 1 << 27}, {h2d, d2h}})->UseManualTime();
TESSEL_BENCHMARK(BM_Copy<true>)->ArgsProduct({{1 << 16, 1 << 20, 1 << 24, 1 << 27}, {h2d, d2h}})->UseManualTime();

struct Scale {
    __host__ __device__ float operator()(float x) const { return 3.f * x + 1.f; }
};

// 16M floats through the device: chunks on several streams (range 1 = streams) vs one piece.
void BM_Pipeline(benchmark::State& state) {
    const std::size_t n = std::size_t(1) << 24;
    const int streams = int(state.range(0));
    std::vector<float> in(n, 0.5f), out(n);
    auto step = [](const float* d_in, float* d_out, std::size_t m, tessel::rt::stream_t s) {
        tessel::launch(tessel::kernels::map<Scale, float, float>, 132, 256, 0, s, m, Scale{}, d_out, d_in);
    };
    const tessel::PipelineOptions o{.chunk_elements = streams == 1 ? n : n / 8, .streams = streams};
    for (auto _ : state) tessel::overlap_pipeline<float, float>(in, out, step, o);
    state.SetBytesProcessed(std::int64_t(state.iterations()) * std::int64_t(2 * n * sizeof(float)));
    state.SetLabel(streams == 1 ? "one piece, one stream" : std::to_string(streams) + " streams, 8 chunks");
}
TESSEL_BENCHMARK(BM_Pipeline)->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

