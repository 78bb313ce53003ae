// Stream and Event values, and the current stream of each device per host thread.
#include <tessel/runtime/launch.hpp>
#include <tessel/stream/pipeline.hpp>
#include <tessel/stream/stream.hpp>

#include <numeric>
#include <thread>

#include "../support/device_array.hpp"
#include "../support/gate.hpp"
#include "../support/slow_kernels.hpp"

namespace {
__global__ void half_of(const int* in, float* out, int n) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = float(in[i]) * 0.5f;
}
}  // namespace

TEST_CASE("streams are shared values; events order and time them", "[stream]") {
    const int n = 1 << 15;
    tessel::testing::DeviceArray<int> x(n), y(n);
    x.poison();
    y.poison();
    tessel::Stream producer = tessel::Stream::create({.non_blocking = true, .priority = -1});
    tessel::Stream consumer = tessel::Stream::create();
    CHECK(producer.priority() == -1);
    CHECK_FALSE(producer.is_default());
    tessel::Stream copy = producer;
    CHECK(copy == producer);
    CHECK_FALSE(copy == consumer);

    tessel::Event start, done;
    const tessel::testing::Gate gate;  // holds the producer until the consumer's copy is queued
    start.record(producer);
    gate.hold(producer.handle());
    tessel::launch(tessel::testing::slow_fill<int>, 8, 256, 0, producer.handle(), x.data(), n, 7, 2);
    done.record(producer);
    consumer.wait(done);
    tessel::rt::memcpy_async(y.data(), x.data(), n * sizeof(int), consumer.handle());  // copies the poison unless it waits
    {
        const std::jthread opener = gate.open_later();
        consumer.synchronize();
    }
    CHECK(consumer.query());
    auto h = y.download();
    CHECK(std::count(h.begin(), h.end(), 7) == n);
    done.synchronize();
    CHECK(done.query());
    CHECK(start.elapsed_ms(done) >= 0.f);
    tessel::Event untimed(false);
    untimed.record(producer);
    untimed.synchronize();
    CHECK_THROWS_AS(start.elapsed_ms(untimed), tessel::InvalidArgument);
}

TEST_CASE("each host thread has its own current stream per device", "[stream]") {
    const tessel::Device d = tessel::current_device();
    CHECK(tessel::current_stream(d).is_default());
    tessel::Stream mine = tessel::Stream::create();
    {
        tessel::StreamGuard guard(mine);
        CHECK(tessel::current_stream(d) == mine);
        tessel::rt::stream_t seen_by_other = reinterpret_cast<tessel::rt::stream_t>(1);
        std::thread other([&] { seen_by_other = tessel::current_stream(d).handle(); });
        other.join();
        CHECK(seen_by_other == nullptr);  // the other thread still has the default stream
    }
    CHECK(tessel::current_stream(d).is_default());  // the guard restored it
}

TEST_CASE("the overlap pipeline computes every chunk, whatever the chunk and stream counts", "[stream][pipeline]") {
    for (auto [n, chunk, streams] : {std::tuple{10007, 1000, 3}, {999, 1000, 4}, {4096, 1024, 1}, {1, 7, 2}, {0, 5, 2}}) {
        INFO("n " << n << " chunk " << chunk << " streams " << streams);
        std::vector<int> in(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) in[std::size_t(i)] = i * 7 - 3000;
        std::vector<float> out(std::size_t(n), std::nanf(""));
        std::vector<std::size_t> seen;
        tessel::overlap_pipeline<int, float>(
            in, out,
            [&](const int* d_in, float* d_out, std::size_t m, tessel::rt::stream_t s) {
                seen.push_back(m);
                tessel::launch(half_of, tessel::blocks_for(m, 128), 128, 0, s, d_in, d_out, int(m));
            },
            {.chunk_elements = std::size_t(chunk), .streams = streams});
        std::size_t wrong = 0;
        for (int i = 0; i < n; ++i) wrong += out[std::size_t(i)] != float(in[std::size_t(i)]) * 0.5f;
        CHECK(wrong == 0);
        CHECK(seen.size() == std::size_t((n + chunk - 1) / chunk));
    }
    std::vector<int> a(3);
    std::vector<float> b(4);
    auto nothing = [](const int*, float*, std::size_t, tessel::rt::stream_t) {};
    CHECK_THROWS_AS((tessel::overlap_pipeline<int, float>(a, b, nothing)), tessel::InvalidArgument);
}

TEST_CASE("a stream or event not yet ready leaves no error behind for the next launch", "[stream]") {
    // CUDA records cudaErrorNotReady as the thread's last error too (the sim does as well): a query
    // that did not clear it would make the next launch's check throw "device not ready".
    const int n = 1 << 15;
    tessel::testing::DeviceArray<int> x(n), y(n);
    tessel::testing::DeviceArray<float> z(n);
    tessel::Stream busy = tessel::Stream::create(), other = tessel::Stream::create();
    bool stream_busy_seen = false, event_busy_seen = false;
    for (int attempt = 0; attempt < 20 && !(stream_busy_seen && event_busy_seen); ++attempt) {
        tessel::launch(tessel::testing::slow_fill<int>, 8, 256, 0, busy.handle(), x.data(), n, 3, 400);
        tessel::Event after;
        after.record(busy);
        const bool event_done = after.query(), stream_done = busy.query();
        event_busy_seen = event_busy_seen || !event_done;
        stream_busy_seen = stream_busy_seen || !stream_done;
        CHECK_NOTHROW(tessel::launch(half_of, (n + 255) / 256, 256, 0, other.handle(), y.data(), z.data(), n));
        busy.synchronize();
        other.synchronize();
    }
    CHECK(stream_busy_seen);  // the case was exercised (400 rounds of 32k elements outlast a query)
    CHECK(event_busy_seen);
}
