// The pinned host cache: power-of-two sizes, reuse, no reuse while a stream that used a block has
// not passed its free, frees that fail half-way (the block is neither lost nor miscounted), the
// invariant checker, and AddressSanitizer poisoning of cached blocks and slack.
#include <tessel/memory/host_allocator.hpp>
#include <tessel/runtime/launch.hpp>

#include <algorithm>
#include <string>

#include "../support/device_array.hpp"
#include "../support/slow_kernels.hpp"

namespace mem = tessel::memory;

namespace {
// Fails the test with every broken invariant listed.
void require_consistent(mem::HostCachingAllocator& h) {
    const auto broken = h.check_invariants();
    std::string all;
    for (const auto& v : broken) all += v + "\n";
    INFO(all);
    REQUIRE(broken.empty());
}
}  // namespace

TEST_CASE("pinned blocks are rounded, cached and reused", "[memory][host]") {
    mem::empty_host_cache();
    const auto before = mem::host_stats();
    void* p = mem::allocate_host(1000);
    CHECK(mem::host_stats().allocated_bytes.current - before.allocated_bytes.current == 1024);
    mem::deallocate_host(p);
    void* q = mem::allocate_host(700);  // same power-of-two class
    CHECK(q == p);
    mem::deallocate_host(q);
    int local = 0;
    CHECK_THROWS_AS(mem::deallocate_host(&local), tessel::InvalidArgument);
    CHECK_THROWS_AS(mem::deallocate_host(q), tessel::InvalidArgument);  // twice
    mem::empty_host_cache();
    CHECK(mem::host_stats().reserved_bytes.current == before.reserved_bytes.current);
    require_consistent(mem::HostCachingAllocator::instance());
}

TEST_CASE("a pinned block used by a stream is not reused before the stream passes its free", "[memory][host][stream]") {
    const int n = 1 << 16;
    tessel::testing::DeviceArray<int> x(std::vector<int>(n, 0));
    auto s = tessel::rt::stream_create(true);
    void* p = mem::allocate_host(4096);
    tessel::launch(tessel::testing::slow_add_one<int>, 4, 256, 0, s, x.data(), n, 400);  // keeps s busy
    tessel::rt::memcpy_async(p, x.data(), 4096, s);        // pinned: queued behind the kernel
    mem::record_host_use(p, s);
    mem::deallocate_host(p);
    void* q = mem::allocate_host(4096);
    CHECK(q != p);  // the copy into p may still be pending
    tessel::rt::stream_synchronize(s);
    mem::deallocate_host(q);
    void* r1 = mem::allocate_host(4096);
    void* r2 = mem::allocate_host(4096);
    CHECK((r1 == p || r2 == p));  // once s has passed, p is back in the cache
    mem::deallocate_host(r1);
    mem::deallocate_host(r2);
    require_consistent(mem::HostCachingAllocator::instance());
    tessel::rt::stream_destroy(s);
}

TEST_CASE("record_host_use checks the stream and its device when called", "[memory][host]") {
    void* p = mem::allocate_host(64);
    CHECK_THROWS_AS(mem::record_host_use(p, nullptr, tessel::Device{9}), tessel::InvalidArgument);
#if defined(TESSEL_BACKEND_SIM)  // a destroyed handle is reliably rejected only by the sim
    auto gone = tessel::rt::stream_create(true);
    tessel::rt::stream_destroy(gone);
    CHECK_THROWS_AS(mem::record_host_use(p, gone), tessel::CudaError);
#endif
    mem::deallocate_host(p);  // nothing was recorded
    require_consistent(mem::HostCachingAllocator::instance());
}

#if defined(TESSEL_BACKEND_SIM)  // the sim rejects destroyed stream handles deterministically
TEST_CASE("a pinned free whose recorded stream was destroyed throws, and the block is reusable", "[memory][host][failure]") {
    mem::HostCachingAllocator h;  // a cache of its own, so the statistics are this test's
    const int n = 1 << 14;
    tessel::testing::DeviceArray<int> x(std::vector<int>(n, 0));
    auto busy = tessel::rt::stream_create(true), gone = tessel::rt::stream_create(true);
    void* p = h.allocate(3000);
    tessel::launch(tessel::testing::slow_add_one<int>, 4, 256, 0, busy, x.data(), n, 300);
    tessel::rt::memcpy_async(p, x.data(), 3000, busy);  // pinned: queued behind the kernel
    h.record_use(p, busy, 0);
    h.record_use(p, gone, 0);
    tessel::rt::stream_destroy(gone);
    try {
        h.deallocate(p);
        FAIL("a free that cannot record its event on a destroyed stream did not report it");
    } catch (const tessel::CudaError& e) {
        CHECK(std::string(e.what()).find("not a live stream") != std::string::npos);
    }
    require_consistent(h);
    CHECK(h.stats().allocation.current == 0);
    CHECK(h.stats().allocated_bytes.current == 0);
    void* q = h.allocate(4000);  // same size class; busy's event has passed (its device was synchronised)
    CHECK(q == p);
    require_consistent(h);
    h.deallocate(q);
    void* r = h.allocate(4096);
    h.record_use(r, reinterpret_cast<tessel::rt::stream_t>(std::uintptr_t(0xdead0)), 0);
    CHECK_THROWS_AS(h.deallocate(r), tessel::CudaError);
    require_consistent(h);
    h.empty_cache();
    require_consistent(h);
    CHECK(h.stats().reserved_bytes.current == 0);
    CHECK(h.stats().num_host_free == h.stats().num_host_alloc);
    tessel::rt::stream_destroy(busy);
}
#endif

TEST_CASE("under AddressSanitizer cached pinned blocks and the slack past a request are poisoned", "[memory][host][asan]") {
    if (!mem::asan::enabled) {
        SUCCEED("poisoning is compiled only into the sim under AddressSanitizer");
        return;
    }
    mem::HostCachingAllocator h;
    auto* p = static_cast<char*>(h.allocate(1000));
    CHECK_FALSE(mem::asan::is_poisoned(p));
    CHECK_FALSE(mem::asan::is_poisoned(p + 999));
    CHECK(mem::asan::is_poisoned(p + 1000));
    CHECK(mem::asan::is_poisoned(p + 1023));
    h.deallocate(p);
    CHECK(mem::asan::is_poisoned(p));
    auto* q = static_cast<char*>(h.allocate(513));  // the same 1024-byte block, a different request
    REQUIRE(q == p);
    CHECK_FALSE(mem::asan::is_poisoned(q + 512));
    CHECK(mem::asan::is_poisoned(q + 513));
    require_consistent(h);
    h.deallocate(q);
    h.empty_cache();
}
