// Stream and Event values, and the current stream of each device per host thread.
#include <tessel/memory/allocator.hpp>
#include <tessel/runtime/launch.hpp>
#include <tessel/stream/pipeline.hpp>
#include <tessel/stream/stream.hpp>
#include <tessel/tensor/tensor.hpp>

#include <algorithm>
#include <numeric>
#include <stdexcept>
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

#if defined(TESSEL_BACKEND_SIM)  // a device fault is sticky on CUDA: it would end every later test
namespace {
__global__ void half_of_or_fault(const int* in, float* out, int n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) throw std::runtime_error("deliberate fault in a pipeline step");
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = float(in[i]) * 0.5f;
}
}  // namespace

TEST_CASE("an overlap pipeline whose step faults gives every buffer back", "[stream][pipeline][failure]") {
    const auto device_before = tessel::memory::stats().allocation[0].current;
    const auto host_before = tessel::memory::host_stats().allocation.current;
    std::vector<int> in(1000, 1);
    std::vector<float> out(1000);
    int calls = 0;
    CHECK_THROWS((tessel::overlap_pipeline<int, float>(
        in, out,
        [&](const int* d_in, float* d_out, std::size_t m, tessel::rt::stream_t s) {
            if (calls++ == 0) tessel::launch(half_of_or_fault, 1, 32, 0, s, d_in, d_out, int(m));
            else tessel::launch(half_of, tessel::blocks_for(m, 128), 128, 0, s, d_in, d_out, int(m));
        },
        {.chunk_elements = 250, .streams = 2})));
    // The fault surfaced in the lanes' final synchronize; their buffers went back all the same.
    CHECK(tessel::memory::stats().allocation[0].current == device_before);
    CHECK(tessel::memory::host_stats().allocation.current == host_before);
}

#endif  // TESSEL_BACKEND_SIM

TEST_CASE("a stream's priority is the one CUDA applies, clamped to the device's range", "[stream]") {
    int least = 0, greatest = 0;
    REQUIRE(tessel::rt::api::cudaDeviceGetStreamPriorityRange(&least, &greatest) == cudaSuccess);
    REQUIRE(greatest < least);  // the sim's and every GPU's: [-5, 0] on sm_90
    for (int asked : {greatest - 7, greatest, least, least + 3}) {
        INFO("asked " << asked);
        const tessel::Stream s = tessel::Stream::create({.non_blocking = true, .priority = asked});
        int applied = 99;
        REQUIRE(tessel::rt::api::cudaStreamGetPriority(s.handle(), &applied) == cudaSuccess);
        CHECK(s.priority() == applied);
        CHECK(applied == std::clamp(asked, greatest, least));
    }
}

TEST_CASE("cudaStreamPerThread is refused wherever a stream is taken", "[stream][memory]") {
    const tessel::rt::stream_t per_thread = cudaStreamPerThread;
    auto refused = [](auto&& call) {
        try {
            call();
            FAIL("cudaStreamPerThread was taken");
        } catch (const tessel::InvalidArgument& e) {
            CHECK_THAT(e.what(), Catch::Contains("cudaStreamPerThread names a different stream on each host thread"));
        }
    };
    refused([&] { tessel::memory::deallocate(tessel::memory::allocate(64, per_thread)); });
    void* p = tessel::memory::allocate(64);
    refused([&] { tessel::memory::record_stream(p, per_thread); });
    tessel::memory::deallocate(p);
    void* h = tessel::memory::allocate_host(64);
    refused([&] { tessel::memory::record_host_use(h, per_thread); });
    tessel::memory::deallocate_host(h);
    const auto x = tessel::ones<float>({3});
    refused([&] { (void)x.clone(per_thread); });
    CHECK(tessel::memory::check_invariants().empty());
}

// Another device's default stream is a null handle too: passed as a Stream, it keeps its device.
TEST_CASE("a Stream of another device keeps its device through record_stream, record_host_use and the ops", "[.multidevice]") {
    REQUIRE(tessel::device_count() >= 2);
    REQUIRE(tessel::current_device().index == 0);
    const tessel::Stream other_default = tessel::Stream::default_stream(tessel::Device{1});
    for (const bool pinned : {false, true}) {
        INFO((pinned ? "record_host_use" : "record_stream"));
        const tessel::testing::Gate gate(tessel::Device{1});
        gate.hold(nullptr);  // device 1's default stream stays busy until the gate opens
        void* p = pinned ? tessel::memory::allocate_host(4096) : tessel::memory::allocate(4096);
        if (pinned) tessel::memory::record_host_use(p, other_default);
        else tessel::memory::record_stream(p, other_default);
        pinned ? tessel::memory::deallocate_host(p) : tessel::memory::deallocate(p);
        void* q = pinned ? tessel::memory::allocate_host(4096) : tessel::memory::allocate(4096);
        CHECK(q != p);  // device 1's default stream has not passed the free yet
        gate.open();
        pinned ? tessel::memory::deallocate_host(q) : tessel::memory::deallocate(q);
        tessel::DeviceGuard on(tessel::Device{1});
        tessel::rt::device_synchronize();
    }
    const auto x = tessel::ones<float>({4});  // device 0
    CHECK_THROWS_WITH(x.clone(other_default), Catch::Contains("(a default stream) belongs to device 1, the tensors are on device 0"));
    CHECK_THROWS_WITH(tessel::memory::allocate(64, other_default),
                      Catch::Contains("belongs to device 1, but the memory is allocated on the current device 0"));
    CHECK(x.clone(tessel::Stream::default_stream(tessel::Device{0})).to_vector() == std::vector<float>(4, 1.f));
}

#if defined(TESSEL_BACKEND_SIM)  // the fault is sticky on CUDA
TEST_CASE("memory::empty_cache empties every device's cache, then reports one device's fault", "[.multidevice]") {
    REQUIRE(tessel::device_count() >= 2);
    void* a = tessel::memory::allocate(1 << 20);
    {
        tessel::DeviceGuard on(tessel::Device{1});
        tessel::memory::deallocate(tessel::memory::allocate(1 << 20));  // cached on device 1
    }
    REQUIRE(tessel::memory::reserved(tessel::Device{1}) > 0);
    tessel::launch(half_of_or_fault, 1, 32, 0, nullptr, static_cast<const int*>(a), static_cast<float*>(a), 8);
    tessel::memory::deallocate(a);
    CHECK_THROWS_WITH(tessel::memory::empty_cache(), Catch::Contains("deliberate fault"));
    CHECK(tessel::memory::reserved(tessel::Device{0}) == 0);
    CHECK(tessel::memory::reserved(tessel::Device{1}) == 0);
}
#endif  // TESSEL_BACKEND_SIM
