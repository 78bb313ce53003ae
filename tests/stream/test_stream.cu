// Stream and Event values, and the current stream of each device per host thread.
#include <tessel/runtime/launch.hpp>
#include <tessel/stream/stream.hpp>

#include <numeric>
#include <thread>

#include "../support/device_array.hpp"

namespace {
__global__ void fill_slowly(int* x, int n, int value, int rounds) {
    for (int r = 0; r < rounds; ++r)
        for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x)) x[i] = value + r - r;
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
    start.record(producer);
    tessel::launch(fill_slowly, 8, 256, 0, producer.handle(), x.data(), n, 7, 100);
    done.record(producer);
    consumer.wait(done);
    tessel::rt::memcpy_async(y.data(), x.data(), n * sizeof(int), consumer.handle());
    consumer.synchronize();
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
