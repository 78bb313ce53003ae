// The cudaMallocAsync backend through the public API; ctest runs these in their own entry with
// TESSEL_ALLOC_CONF=backend:async (and TESSEL_SIM_MEMORY=64MiB on the sim). The failure tests at the
// end use an AsyncDeviceAllocator of their own and run in the main entry.
#include <tessel/memory/allocator.hpp>
#include <tessel/memory/caching_allocator.hpp>  // the allocators themselves
#include <tessel/runtime/launch.hpp>
#include <tessel/runtime/peer.hpp>
#include <tessel/tensor/tensor.hpp>

#include <string>

#include "../support/device_array.hpp"
#include "../support/slow_kernels.hpp"

namespace mem = tessel::memory;

namespace {
constexpr std::size_t MiB = std::size_t(1) << 20;

// Fails the test with every broken invariant listed.
void require_consistent(mem::AsyncDeviceAllocator& a) {
    const auto broken = a.check_invariants();
    std::string all;
    for (const auto& v : broken) all += v + "\n";
    INFO(all);
    REQUIRE(broken.empty());
}
}  // namespace

TEST_CASE("the async backend allocates, counts and reuses in stream order", "[.async]") {
    REQUIRE(mem::backend() == mem::Backend::async);
    mem::empty_cache();
    const auto before = mem::stats();
    auto s = tessel::rt::stream_create(true);
    void* a = mem::allocate(3 * MiB, s);
    auto during = mem::stats();
    CHECK(during.allocation[0].current == before.allocation[0].current + 1);
    CHECK(during.allocated_bytes[0].current == before.allocated_bytes[0].current + std::int64_t(3 * MiB));
    CHECK(during.reserved_bytes[0].current >= during.allocated_bytes[0].current);
    mem::deallocate(a);
    void* b = mem::allocate(3 * MiB, s);  // same stream: reused at once
    CHECK(b == a);
    mem::deallocate(b);
    CHECK(mem::stats().allocation[0].current == before.allocation[0].current);
    require_consistent(mem::CachingAllocator::instance().async(tessel::current_device().index));
    {
        auto t = tessel::arange<float>(0, 1000, 1, {.stream = s});
        CHECK(t.to_vector()[999] == 999.f);
    }
    tessel::rt::stream_synchronize(s);
    tessel::rt::stream_destroy(s);
}

TEST_CASE("the async backend honours record_stream", "[.async]") {
    const int n = 1 << 15;
    auto a = tessel::rt::stream_create(true), b = tessel::rt::stream_create(true);
    std::vector<int> h(n);
    for (int i = 0; i < n; ++i) h[i] = i * 5 + 2;
    tessel::testing::DeviceArray<int> y(n);
    int* x = static_cast<int*>(mem::allocate(n * sizeof(int), a));
    tessel::rt::memcpy_async(x, h.data(), n * sizeof(int), a);
    auto ready = tessel::rt::event_create(false);
    tessel::rt::event_record(ready, a);
    tessel::rt::stream_wait_event(b, ready);
    tessel::launch(tessel::testing::slow_copy<int>, 8, 256, 0, b, x, y.data(), n, 300);
    mem::record_stream(x, b);
    mem::deallocate(x);
    int* x2 = static_cast<int*>(mem::allocate(n * sizeof(int), a));
    tessel::rt::memset_async(x2, 0, n * sizeof(int), a);  // ordered after b's reader when x2 == x
    tessel::rt::stream_synchronize(b);
    tessel::testing::check_equal(y.download(), h, "what the reader on stream b saw");
    tessel::rt::device_synchronize();
    mem::deallocate(x2);
    tessel::rt::event_destroy(ready);
    tessel::rt::stream_destroy(a);
    tessel::rt::stream_destroy(b);
}

#if defined(TESSEL_BACKEND_SIM)
TEST_CASE("the async backend trims the pool and retries before OutOfMemoryError", "[.async]") {
    REQUIRE(tessel::properties().total_memory == 64 * MiB);
    mem::empty_cache();
    void* a = mem::allocate(20 * MiB);
    void* b = mem::allocate(20 * MiB);
    mem::deallocate(a);                 // back in the pool, still reserved
    void* c = mem::allocate(40 * MiB);  // fits only after the pool is trimmed
    CHECK(mem::stats().num_alloc_retries == 1);
    try {
        (void)mem::allocate(10 * MiB);
        FAIL("allocation beyond the capacity did not fail");
    } catch (const tessel::OutOfMemoryError& e) {
        const std::string msg = e.what();
        INFO(msg);
        CHECK(msg.find("cudaMallocAsync backend") != std::string::npos);
        CHECK(msg.find("tried to allocate 10485760 bytes") != std::string::npos);
    }
    CHECK(mem::stats().num_ooms == 1);
    // A size no device holds is refused before the pool and counted too.
    CHECK_THROWS_WITH(mem::allocate((std::size_t(1) << 50) + 1), Catch::Contains("more than any device holds"));
    CHECK(mem::stats().num_ooms == 2);
    mem::deallocate(b);
    mem::deallocate(c);
    mem::empty_cache();
    CHECK(mem::stats().reserved_bytes[0].current == 0);
}

// A device's pool (and on a GPU its context, hundreds of MiB) is made by its first allocation, not
// by the first allocation anywhere: statistics, empty_cache and the invariants of a device never
// used leave it alone. Its own ctest entry (tests.sim-async-lazy: a process of two simulated
// devices that nothing else touches), since any earlier test could have used device 1.
TEST_CASE("the async backend makes a device's pool on its first allocation there", "[.async-lazy]") {
    REQUIRE(tessel::device_count() >= 2);
    const tessel::Device other{1};
    REQUIRE(tessel::current_device().index == 0);
    REQUIRE_FALSE(tessel::sim::context_created(other.index));
    void* p = mem::allocate(MiB);
    mem::empty_cache();
    const mem::DeviceStats untouched = mem::stats(other);
    CHECK(untouched.allocation[0].peak == 0);
    CHECK(untouched.reserved_bytes[0].peak == 0);
    CHECK(mem::reserved(other) == 0);
    CHECK(mem::check_invariants(other).empty());
    CHECK(mem::memory_summary(other).find("device 1") != std::string::npos);
    // Its reserved-memory totals are zeros the pool does not report: the table says so.
    CHECK(mem::memory_summary(other).find("backend async: reserved memory is the pool's current and peak only") != std::string::npos);
    mem::reset_peak_stats(other);
    CHECK_FALSE(tessel::sim::context_created(other.index));
    mem::deallocate(p);
    {
        tessel::DeviceGuard on(other);
        const auto t = tessel::full<float>({1001}, 2.f);
        CHECK(tessel::sim::context_created(other.index));
        CHECK(mem::allocated(other) >= std::int64_t(1001 * sizeof(float)));
        CHECK(mem::reserved(other) >= mem::allocated(other));
        CHECK(t.to_vector() == std::vector<float>(1001, 2.f));
    }
    mem::empty_cache();
    CHECK(mem::reserved(other) == 0);
}

// cudaDeviceEnablePeerAccess does not reach pool memory; enable_peer_access grants it to the pool.
TEST_CASE("under the async backend, enable_peer_access lets the peer read and write the pool", "[.async]") {
    REQUIRE(tessel::device_count() >= 2);
    auto access = [](int reader, int owner) {
        cudaMemPool_t pool = nullptr;
        TESSEL_CUDA_CHECK(tessel::rt::api::cudaDeviceGetDefaultMemPool(&pool, owner));
        cudaMemLocation where{};
        where.type = cudaMemLocationTypeDevice;
        where.id = reader;
        cudaMemAccessFlags flags{};
        TESSEL_CUDA_CHECK(tessel::rt::api::cudaMemPoolGetAccess(&flags, pool, &where));
        return flags;
    };
    CHECK(access(0, 1) == cudaMemAccessFlagsProtNone);
    CHECK(access(1, 1) == cudaMemAccessFlagsProtReadWrite);
    tessel::enable_peer_access(tessel::Device{0}, tessel::Device{1});
    CHECK(access(0, 1) == cudaMemAccessFlagsProtReadWrite);
    CHECK(access(1, 0) == cudaMemAccessFlagsProtNone);  // one direction only
    tessel::enable_peer_access(tessel::Device{0}, tessel::Device{1});  // idempotent
    tessel::enable_peer_access(tessel::Device{1}, tessel::Device{0});
    CHECK(access(1, 0) == cudaMemAccessFlagsProtReadWrite);
}

TEST_CASE("an async free whose recorded stream was destroyed throws, and the memory goes back to the pool", "[memory][async][failure]") {
    mem::AsyncDeviceAllocator a(0);  // its own books, on the device's default pool
    a.empty_cache();
    const auto reserved_before = a.stats().reserved_bytes[0].current;
    auto s = tessel::rt::stream_create(true), gone = tessel::rt::stream_create(true);
    void* p = a.allocate(4096, s);
    a.record_stream(p, gone, 0);
    tessel::rt::stream_destroy(gone);
    try {
        a.deallocate(p);
        FAIL("a free that cannot wait for a destroyed stream did not report it");
    } catch (const tessel::CudaError& e) {
        CHECK(std::string(e.what()).find("not a live stream") != std::string::npos);
    }
    require_consistent(a);
    CHECK_FALSE(a.owns(p));
    CHECK(a.stats().allocation[0].current == 0);
    void* q = a.allocate(4096, s);  // freed on s after all: reused there at once
    CHECK(q == p);
    a.deallocate(q);
    require_consistent(a);
    a.empty_cache();
    CHECK(a.stats().reserved_bytes[0].current == reserved_before);
    tessel::rt::stream_destroy(s);
}

TEST_CASE("an async free whose own stream was destroyed throws, and the memory goes back to the pool", "[memory][async][failure]") {
    mem::AsyncDeviceAllocator a(0);
    a.empty_cache();
    const auto reserved_before = a.stats().reserved_bytes[0].current;
    auto s = tessel::rt::stream_create(true);
    void* p = a.allocate(3 * MiB, s);
    tessel::rt::memset_async(p, 0, 3 * MiB, s);
    tessel::rt::stream_destroy(s);
    CHECK_THROWS_AS(a.deallocate(p), tessel::CudaError);  // freed on the default stream instead
    require_consistent(a);
    CHECK(a.stats().allocated_bytes[0].current == 0);
    a.empty_cache();
    CHECK(a.stats().reserved_bytes[0].current == reserved_before);
    void* q = a.allocate(3 * MiB, nullptr);
    a.deallocate(q);
    a.empty_cache();
    require_consistent(a);
}
#endif
