// The pinned host cache: power-of-two sizes, reuse, and no reuse while a stream that used a block
// has not passed its free.
#include <tessel/memory/host_allocator.hpp>
#include <tessel/runtime/launch.hpp>

#include "../support/device_array.hpp"
#include "../support/slow_kernels.hpp"

namespace mem = tessel::memory;

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
    tessel::rt::stream_destroy(s);
}
