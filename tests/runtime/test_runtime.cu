// The device runtime layer on either backend: properties, versions, errors, memory, copies,
// streams and events.
#include <tessel/runtime/device.hpp>
#include <tessel/runtime/launch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "../support/device_array.hpp"
#include "../support/gate.hpp"

using tessel::testing::DeviceArray;

namespace {
__global__ void iota_kernel(int* x, int n, int start) {
    const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) x[i] = start + i;
}
}  // namespace

TEST_CASE("device properties describe a usable device", "[runtime][device]") {
    REQUIRE(tessel::is_available());
    REQUIRE(tessel::device_count() >= 1);
    CHECK(tessel::unavailable_reason().empty());
    const auto p = tessel::properties();
    CHECK_FALSE(p.name.empty());
    CHECK(p.major >= 7);
    CHECK(p.sm_count > 0);
    CHECK(p.total_memory > 0);
    CHECK(p.free_memory <= p.total_memory);
    CHECK(p.warp_size == 32);
    CHECK(p.max_threads_per_block == 1024);
    CHECK(p.shared_memory_per_block == 48 * 1024);
    CHECK(p.shared_memory_per_block_optin >= p.shared_memory_per_block);
    CHECK(p.shared_memory_per_sm >= p.shared_memory_per_block_optin);
    CHECK(p.l2_cache_bytes > 0);
    CHECK(p.clock_khz > 0);
    CHECK(p.theoretical_bandwidth_gbs() > 0);
    CHECK(p.simulated == (tessel::backend == tessel::Backend::sim));
    if (tessel::backend == tessel::Backend::sim) CHECK(p.compute_capability() == "9.0");
}

TEST_CASE("runtime and driver versions come with a compatibility verdict", "[runtime][device]") {
    const auto v = tessel::versions();
    CHECK(v.runtime == CUDART_VERSION);
    CHECK(v.driver >= 1000);
    CHECK(v.compatible);
    CHECK_FALSE(v.verdict.empty());
    CHECK(tessel::version_string(13000) == "13.0");
    CHECK(tessel::version_string(12080) == "12.8");
}

TEST_CASE("a failing runtime call throws CudaError naming the code, the call and the place", "[runtime][errors]") {
    int on_stack = 0;
    try {
        TESSEL_CUDA_CHECK(tessel::rt::api::cudaFree(&on_stack));
        FAIL("cudaFree of a stack address did not fail");
    } catch (const tessel::CudaError& e) {
        CHECK(e.code() == int(cudaErrorInvalidValue));
        CHECK(e.name() == "cudaErrorInvalidValue");
        CHECK(e.expression().find("cudaFree") != std::string::npos);
        CHECK(std::string(e.file()).find("test_runtime") != std::string::npos);
        CHECK(e.line() > 0);
        CHECK(std::string(e.what()).find("invalid argument") != std::string::npos);
    }
    CHECK(tessel::rt::api::cudaGetLastError() == cudaSuccess);  // check() cleared it
}

TEST_CASE("selecting a device that does not exist is an InvalidArgument naming the count", "[runtime][errors]") {
    const int n = tessel::device_count();
    try {
        tessel::set_device(tessel::Device{n + 3});
        FAIL("set_device did not throw");
    } catch (const tessel::InvalidArgument& e) {
        const std::string msg = e.what();
        CHECK(msg.find("device " + std::to_string(n + 3)) != std::string::npos);
        CHECK(msg.find(std::to_string(n) + " device(s)") != std::string::npos);
    }
    CHECK(tessel::current_device() == tessel::Device{0});
}

TEST_CASE("copies between host, pinned and device memory round-trip", "[runtime][memory]") {
    const std::size_t n = 100003;
    auto src = tessel::testing::random_vector<float>(n, 1);
    DeviceArray<float> a(n), b(n);
    a.poison();
    b.poison();
    float* pinned = static_cast<float*>(tessel::rt::malloc_pinned(n * sizeof(float)));
    std::fill(pinned, pinned + n, -7.f);

    tessel::rt::memcpy(a.data(), src.data(), n * sizeof(float));                       // pageable H2D
    tessel::rt::memcpy_async(b.data(), a.data(), n * sizeof(float), nullptr);           // D2D
    tessel::rt::memcpy_async(pinned, b.data(), n * sizeof(float), nullptr);             // D2H pinned
    tessel::rt::device_synchronize();
    CHECK(std::equal(pinned, pinned + n, src.begin()));

    tessel::rt::memset_async(a.data(), 0, 40 * sizeof(float), nullptr);
    auto h = a.download();
    CHECK(std::all_of(h.begin(), h.begin() + 40, [](float v) { return v == 0.f; }));
    CHECK(std::equal(h.begin() + 40, h.end(), src.begin() + 40));
    tessel::rt::free_pinned(pinned);
}

TEST_CASE("streams order work; events time it and order other streams", "[runtime][stream]") {
    const int n = 4099;
    DeviceArray<int> x(n), y(n);
    x.poison();
    y.poison();
    auto s1 = tessel::rt::stream_create(false, 0);
    auto s2 = tessel::rt::stream_create(true, -1);
    auto start = tessel::rt::event_create(), stop = tessel::rt::event_create(), ready = tessel::rt::event_create(false);
    const tessel::testing::Gate gate;  // holds s1 until s2's copy is queued: without the wait it copies the poison
    tessel::rt::event_record(start, s1);
    gate.hold(s1);
    tessel::launch(iota_kernel, tessel::blocks_for(n, 128), 128, 0, s1, x.data(), n, 10);
    tessel::rt::event_record(ready, s1);
    tessel::rt::event_record(stop, s1);
    tessel::rt::stream_wait_event(s2, ready);
    tessel::rt::memcpy_async(y.data(), x.data(), n * sizeof(int), s2);
    {
        const std::jthread opener = gate.open_later();
        tessel::rt::stream_synchronize(s2);
    }
    std::vector<int> want(n);
    std::iota(want.begin(), want.end(), 10);
    tessel::testing::check_equal(y.download(), want, "copy ordered after iota by an event");

    tessel::rt::event_synchronize(stop);
    CHECK(tessel::rt::event_query(stop));
    CHECK(tessel::rt::event_elapsed_ms(start, stop) >= 0.f);
    CHECK_THROWS_AS(tessel::rt::event_elapsed_ms(start, ready), tessel::CudaError);  // ready has no timing
    CHECK(tessel::rt::stream_query(s1));
    for (auto e : {start, stop, ready}) tessel::rt::event_destroy(e);
    tessel::rt::stream_destroy(s1);
    tessel::rt::stream_destroy(s2);
}

TEST_CASE("the free-memory figure follows allocations", "[runtime][memory]") {
    if (tessel::backend != tessel::Backend::sim) SUCCEED("GPU drivers report free memory in coarse pages");
    else {
        const auto before = tessel::rt::memory_info();
        void* p = tessel::rt::malloc_device(12345);
        const auto during = tessel::rt::memory_info();
        CHECK(before.free_bytes - during.free_bytes == 12345);
        CHECK(during.total_bytes == before.total_bytes);
        tessel::rt::free_device(p);
        CHECK(tessel::rt::memory_info().free_bytes == before.free_bytes);
    }
}

#if defined(TESSEL_BACKEND_SIM)
TEST_CASE("the sim rejects copies outside live allocations and unknown streams", "[runtime][sim]") {
    DeviceArray<int> x(10);
    std::vector<int> h(20);
    try {
        tessel::rt::memcpy(h.data(), x.data(), 20 * sizeof(int));
        FAIL("over-long copy did not fail");
    } catch (const tessel::CudaError& e) {
        CHECK(e.name() == "cudaErrorInvalidValue");
        CHECK(std::string(e.what()).find("not inside a live device allocation") != std::string::npos);
    }
    auto bogus = reinterpret_cast<tessel::rt::stream_t>(std::uintptr_t(0x1234));
    CHECK_THROWS_AS(tessel::rt::stream_synchronize(bogus), tessel::CudaError);
}
#endif

// Peer access and copies between devices: three simulated devices in tests.sim-multidevice (every
// pair can), every device of a multi-GPU machine otherwise.
#include <tessel/runtime/peer.hpp>
#include <tessel/tensor/tensor.hpp>

namespace {
void check_peer_copies() {
    const int n = tessel::device_count();
    for (int a = 0; a < n; ++a) {
        CHECK(!tessel::can_access_peer(tessel::Device{a}, tessel::Device{a}));
        for (int b = 0; b < n; ++b)
            if (a != b && tessel::can_access_peer(tessel::Device{a}, tessel::Device{b})) {
                tessel::enable_peer_access(tessel::Device{a}, tessel::Device{b});
                tessel::enable_peer_access(tessel::Device{a}, tessel::Device{b});  // idempotent
            }
    }
    // A tensor around the ring of devices and back to the host, every element compared.
    const auto host = tessel::testing::random_vector<float>(100003, 7);
    tessel::Tensor<float> t = tessel::from_host<float>(std::span<const float>(host), tessel::Shape{100003}, tessel::TensorOptions{.device = tessel::Device{0}});
    for (int d = 1; d <= n; ++d) {
        t = t.to(tessel::TensorOptions{.device = tessel::Device{d % n}});
        CHECK(t.device().index == d % n);
    }
    CHECK(t.to_vector() == host);
    // copy_between on raw device memory, between the last and the first device.
    const tessel::Tensor<float> src = t.to(tessel::TensorOptions{.device = tessel::Device{n - 1}});
    const tessel::Tensor<float> dst = tessel::full<float>({100003}, -1.f, tessel::TensorOptions{.device = tessel::Device{0}});
    const tessel::Stream s = tessel::current_stream(tessel::Device{0});
#if defined(TESSEL_BACKEND_SIM)
    const auto direct = tessel::sim::peer_copy_count(), staged = tessel::sim::staged_copy_count();
#endif
    tessel::current_stream(tessel::Device{n - 1}).synchronize();  // src is written
    tessel::copy_between(dst.data(), tessel::Device{0}, src.data(), tessel::Device{n - 1}, 100003 * sizeof(float), s.handle());
    s.synchronize();
    CHECK(dst.to_vector() == host);
#if defined(TESSEL_BACKEND_SIM)
    CHECK(tessel::sim::peer_copy_count() == direct + 1);  // enabled above: direct
    CHECK(tessel::sim::staged_copy_count() == staged);
#endif
}
}  // namespace

TEST_CASE("peer access between simulated devices, and copies across all of them", "[.multidevice]") {
    check_peer_copies();
    for (int d = 0; d < tessel::device_count(); ++d) tessel::current_stream(tessel::Device{d}).synchronize();
    tessel::memory::empty_cache();  // the other multidevice tests start from devices with nothing cached
}

TEST_CASE("peer access and copies between the GPUs of this machine", "[runtime][peer]") {
    if (tessel::device_count() < 2) return;  // one device: nothing between devices to test
    check_peer_copies();
}

namespace {
// Holds device 1's current stream at a gate, runs `copy` (which queues a copy from device 0 onto
// that stream), then writes the source on device 0's current stream and opens the gate. The copy
// must return while the gate is shut (a blocking copy waits for the opener's deadline: a failure,
// not a hang) and must read the source before device 0's write (without torch's two-way ordering
// the write runs first and the copy reads it).
template <class Copy>
void check_copy_returns_before_source_writes(int* source, int n, Copy&& copy) {
    const tessel::testing::Gate gate(tessel::Device{1});
    gate.hold(tessel::current_stream(tessel::Device{1}).handle());
    std::atomic<bool> returned{false}, opened_by_deadline{false};
    std::jthread opener([&] {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!returned && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (!returned) opened_by_deadline = true, gate.open();
    });
    copy();
    returned = true;
    CHECK_FALSE(opened_by_deadline);  // returned while device 1's stream was held
    tessel::launch(iota_kernel, tessel::blocks_for(n, 128), 128, 0, tessel::current_stream(tessel::Device{0}).handle(), source, n,
                   -7 * n);
}  // the gate opens as it goes

void check_cross_device_copies_are_queued() {
    REQUIRE(tessel::detail::device_gather.load() != nullptr);  // the strided case gathers on device 0
    constexpr int rows = 37, cols = 43, n = rows * cols;  // 13 blocks of 128: under TSan each is 128 OS threads
    const auto host = tessel::testing::random_vector<int>(std::size_t(n), 11, -1000, 1000);
    const auto on_zero = [&] {
        return tessel::from_host<int>(std::span<const int>(host), tessel::Shape{rows, cols}, tessel::TensorOptions{.device = tessel::Device{0}});
    };
    const tessel::TensorOptions to_one{.device = tessel::Device{1}};
    {
        const auto x = on_zero();
        tessel::Tensor<int> y;
        check_copy_returns_before_source_writes(x.data(), n, [&] { y = x.to(to_one); });
        CHECK(y.to_vector() == host);
    }
    {
        const auto x = on_zero();
        const auto y = tessel::full<int>({rows, cols}, -1, to_one);
        check_copy_returns_before_source_writes(x.data(), n, [&] { y.copy_(x); });
        CHECK(y.to_vector() == host);
    }
    {  // a transposed view, gathered on its own device first
        const auto x = on_zero();
        tessel::Tensor<int> y;
        check_copy_returns_before_source_writes(x.data(), n, [&] { y = x.transpose(0, 1).to(to_one); });
        std::vector<int> expected(static_cast<std::size_t>(n));
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < cols; ++c) expected[std::size_t(c) * rows + std::size_t(r)] = host[std::size_t(r) * cols + std::size_t(c)];
        CHECK(y.shape() == tessel::Shape{cols, rows});
        CHECK(y.to_vector() == expected);
    }
    {  // the copy waits for a write queued on the source device's current stream, not one tessel
       // tracks: the source's last tracked write is on another stream of its device
        const tessel::Stream s0 = tessel::Stream::create({}, tessel::Device{0});
        const auto x = tessel::from_host<int>(std::span<const int>(host), tessel::Shape{rows, cols},
                                              tessel::TensorOptions{.device = tessel::Device{0}, .stream = s0.handle()});
        s0.synchronize();
        tessel::Tensor<int> y;
        {
            const tessel::testing::Gate gate(tessel::Device{0});
            gate.hold(tessel::current_stream(tessel::Device{0}).handle());
            tessel::DeviceGuard g(tessel::Device{0});
            tessel::launch(iota_kernel, tessel::blocks_for(n, 128), 128, 0, tessel::current_stream(tessel::Device{0}).handle(), x.data(), n,
                           5 * n);
            y = x.to(to_one);  // returns at once: the wait is the stream's
        }  // the gate opens
        std::vector<int> expected(static_cast<std::size_t>(n));
        std::iota(expected.begin(), expected.end(), 5 * n);
        CHECK(y.to_vector() == expected);
    }
    for (int d = 0; d < tessel::device_count(); ++d) tessel::current_stream(tessel::Device{d}).synchronize();
}
}  // namespace

TEST_CASE("a copy to another device returns once queued, before later writes to its source (simulated devices)", "[.multidevice]") {
    check_cross_device_copies_are_queued();
    tessel::memory::empty_cache();  // the other multidevice tests start from devices with nothing cached
}

TEST_CASE("a copy to another GPU returns once queued, before later writes to its source", "[runtime][peer]") {
    if (tessel::device_count() < 2) return;  // one device: nothing between devices to test
    check_cross_device_copies_are_queued();
}

// CUDA refuses a kernel launch into a stream of another device than the current one (copies and
// event waits may cross devices) and the elapsed time between events of two devices; the sim does
// the same, so a missing DeviceGuard in tessel fails on the sim as it would on a GPU.
namespace {
void check_launches_need_the_streams_device() {
    REQUIRE(tessel::current_device().index == 0);
    tessel::rt::stream_t on_one = nullptr;
    tessel::rt::event_t start = nullptr, end = nullptr;
    {
        tessel::DeviceGuard g(tessel::Device{1});
        on_one = tessel::rt::stream_create(true);
        end = tessel::rt::event_create(true);
    }
    start = tessel::rt::event_create(true);
    DeviceArray<int> x(1000);  // device 0's
    try {
        tessel::launch(iota_kernel, 4, 256, 0, on_one, x.data(), 1000, 5);
        FAIL("a launch into device 1's stream with device 0 current did not fail");
    } catch (const tessel::CudaError& e) {
#if defined(TESSEL_BACKEND_SIM)
        CHECK(std::string(e.what()).find("of device 1 while device 0 is current") != std::string::npos);
#endif
    }
    CHECK(tessel::rt::api::cudaGetLastError() == cudaSuccess);  // reported once, by the launch
    tessel::launch(iota_kernel, 4, 256, 0, nullptr, x.data(), 1000, 5);  // device 0's own stream is fine
    tessel::rt::event_record(start, nullptr);
    {
        tessel::DeviceGuard g(tessel::Device{1});
        tessel::rt::event_record(end, on_one);
    }
    tessel::rt::event_synchronize(end);
    tessel::rt::device_synchronize();
    float ms = 0;
    CHECK(tessel::rt::api::cudaEventElapsedTime(&ms, start, end) != cudaSuccess);
    (void)tessel::rt::api::cudaGetLastError();
    std::vector<int> expected(1000);
    std::iota(expected.begin(), expected.end(), 5);
    CHECK(x.download() == expected);
    tessel::rt::event_destroy(start);
    {
        tessel::DeviceGuard g(tessel::Device{1});
        tessel::rt::event_destroy(end);
        tessel::rt::stream_destroy(on_one);
    }
}
}  // namespace

TEST_CASE("a launch into another device's stream is refused, on the sim as by CUDA", "[.multidevice]") {
    check_launches_need_the_streams_device();
}

TEST_CASE("a launch into another GPU's stream is refused", "[runtime][peer]") {
    if (tessel::device_count() < 2) return;  // one device: no other device's stream
    check_launches_need_the_streams_device();
}
