// The caching device allocator: sizes and pools, reuse within a stream, split and coalesce,
// record_stream, a randomized model test against invariants that must hold, fragmentation, memory
// fractions, concurrent host threads, MemoryScope, and (in its own ctest entry) OOM at the sim's
// capacity with recovery.
#include <tessel/memory/allocator.hpp>
#include <tessel/runtime/launch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "../support/device_array.hpp"
#include "../support/slow_kernels.hpp"

namespace mem = tessel::memory;

namespace {

constexpr std::size_t MiB = std::size_t(1) << 20;

// Allocated blocks as the snapshot shows them: address -> size.
std::map<std::uintptr_t, std::size_t> allocated_blocks(const std::vector<mem::SegmentInfo>& snap) {
    std::map<std::uintptr_t, std::size_t> out;
    for (const auto& seg : snap) {
        std::uintptr_t at = seg.address;
        for (const auto& b : seg.blocks) {
            if (b.allocated) out[at] = b.size;
            at += b.size;
        }
    }
    return out;
}

// A fresh allocator of its own on device 0, so a test's statistics are its own.
std::unique_ptr<mem::DeviceCachingAllocator> fresh(const mem::AllocatorConfig& c = {}) {
    return std::make_unique<mem::DeviceCachingAllocator>(0, c);
}

}  // namespace

TEST_CASE("sizes round to 512 bytes and pick the small or large pool", "[memory]") {
    auto a = fresh();
    mem::Block* tiny = a->malloc(1, nullptr);
    mem::Block* small = a->malloc(MiB, nullptr);
    mem::Block* big = a->malloc(11 * MiB + 5, nullptr);  // its own segment, rounded to 12 MiB
    mem::Block* mid = a->malloc(MiB + 1, nullptr);       // does not fit the 12 MiB segment's rest: 20 MiB
    CHECK(big->size == 12 * MiB);                         // the rest (< 1 MiB) is not split off
    CHECK(tiny->size == 512);
    CHECK(tiny->pool->is_small);
    CHECK(small->size == MiB);
    CHECK(small->pool->is_small);
    CHECK_FALSE(mid->pool->is_small);
    CHECK(mid->size == MiB + 512);
    const auto s = a->stats();
    CHECK(s.segment[int(mem::StatPool::small_pool)].current == 1);  // both small blocks from one 2 MiB segment
    CHECK(s.segment[int(mem::StatPool::large_pool)].current == 2);  // a 20 MiB segment and a 12 MiB one
    CHECK(s.reserved_bytes[0].current == std::int64_t(2 * MiB + 20 * MiB + 12 * MiB));
    CHECK(s.requested_bytes[0].current == std::int64_t(1 + MiB + MiB + 1 + 11 * MiB + 5));
    CHECK(s.allocated_bytes[0].current == std::int64_t(512 + MiB + (MiB + 512) + big->size));
    for (auto* b : {tiny, small, mid, big}) a->free(b);
    CHECK(a->stats().allocated_bytes[0].current == 0);
    a->empty_cache();
    CHECK(a->stats().reserved_bytes[0].current == 0);
}

TEST_CASE("a freed block is reused at once on its stream, not on another", "[memory]") {
    auto a = fresh();
    auto s1 = tessel::rt::stream_create(true), s2 = tessel::rt::stream_create(true);
    mem::Block* b = a->malloc(4096, s1);
    const void* p = b->ptr;
    a->free(b);
    mem::Block* again = a->malloc(4000, s1);
    CHECK(static_cast<const void*>(again->ptr) == p);
    mem::Block* other = a->malloc(4000, s2);
    CHECK(static_cast<const void*>(other->ptr) != p);
    a->free(again);
    a->free(other);
    a->empty_cache();
    tessel::rt::stream_destroy(s1);
    tessel::rt::stream_destroy(s2);
}

TEST_CASE("blocks split from one segment coalesce when freed", "[memory]") {
    auto a = fresh();
    mem::Block* x = a->malloc(512 * 1024, nullptr);
    mem::Block* y = a->malloc(512 * 1024, nullptr);
    mem::Block* z = a->malloc(512 * 1024, nullptr);
    CHECK(static_cast<const void*>(y->ptr) == x->ptr + 512 * 1024);
    CHECK(static_cast<const void*>(z->ptr) == y->ptr + 512 * 1024);
    auto snap = a->snapshot();
    REQUIRE(snap.size() == 1);
    CHECK(snap[0].blocks.size() == 4);  // x, y, z and the free rest of the 2 MiB segment
    CHECK(a->stats().inactive_split[0].current == 1);
    a->free(y);
    CHECK(a->stats().inactive_split[0].current == 2);
    a->free(x);  // merges with y
    CHECK(a->stats().inactive_split[0].current == 2);
    CHECK(a->largest_free_block() == 1024 * 1024);
    a->free(z);  // merges everything back into one whole segment
    snap = a->snapshot();
    REQUIRE(snap.size() == 1);
    CHECK(snap[0].blocks.size() == 1);
    CHECK(a->stats().inactive_split[0].current == 0);
    CHECK(a->stats().inactive_split_bytes[0].current == 0);
    a->empty_cache();
}

TEST_CASE("record_stream keeps a block from reuse until the other stream passes its free", "[memory][stream]") {
    const int n = 1 << 15;
    auto a = tessel::rt::stream_create(true), b = tessel::rt::stream_create(true);
    std::vector<int> h(n);
    for (int i = 0; i < n; ++i) h[i] = i * 3 + 1;
    tessel::testing::DeviceArray<int> y(n);

    SECTION("without record_stream the memory is reused at once (what the other section guards against)") {
        auto alloc = fresh();
        mem::Block* x = alloc->malloc(n * sizeof(int), a);
        const void* at = x->ptr;
        alloc->free(x);
        mem::Block* x2 = alloc->malloc(n * sizeof(int), a);
        CHECK(static_cast<const void*>(x2->ptr) == at);
        alloc->free(x2);
        alloc->empty_cache();
    }
    SECTION("with record_stream, a slow reader on another stream sees the old contents") {
        int* x = static_cast<int*>(mem::allocate(n * sizeof(int), a));
        tessel::rt::memcpy_async(x, h.data(), n * sizeof(int), a);  // pageable: returns after the copy
        auto ready = tessel::rt::event_create(false);
        tessel::rt::event_record(ready, a);
        tessel::rt::stream_wait_event(b, ready);
        tessel::launch(tessel::testing::slow_copy<int>, 8, 256, 0, b, x, y.data(), n, 300);  // reads x for a while on b
        mem::record_stream(x, b);
        mem::deallocate(x);
        int* x2 = static_cast<int*>(mem::allocate(n * sizeof(int), a));
        CHECK(x2 != x);
        tessel::rt::memset_async(x2, 0, n * sizeof(int), a);  // would clobber x if it were reused
        tessel::rt::stream_synchronize(b);
        tessel::testing::check_equal(y.download(), h, "what the reader on stream b saw");
        mem::deallocate(x2);
        tessel::rt::event_destroy(ready);
    }
    tessel::rt::device_synchronize();
    tessel::rt::stream_destroy(a);
    tessel::rt::stream_destroy(b);
}

TEST_CASE("randomized model test: live blocks never overlap and the statistics add up", "[memory][model]") {
    auto alloc = fresh();
    std::mt19937_64 rng(20261129);
    std::vector<tessel::rt::stream_t> streams = {nullptr, tessel::rt::stream_create(true), tessel::rt::stream_create(true)};
    struct Live {
        mem::Block* block;
        std::size_t requested;
        unsigned char tag;
    };
    std::vector<Live> live;
    std::int64_t peak_seen = 0;
    auto random_size = [&] {  // log-uniform from 1 byte to 24 MiB
        std::uniform_real_distribution<double> e(0.0, std::log2(24.0 * MiB));
        return std::size_t(std::exp2(e(rng)));
    };
    auto check_invariants = [&] {
        const auto snap = alloc->snapshot();
        const auto s = alloc->stats();
        const auto blocks = allocated_blocks(snap);
        REQUIRE(blocks.size() == live.size());
        std::int64_t bytes = 0, requested = 0, reserved = 0;
        for (const auto& l : live) {
            auto it = blocks.find(reinterpret_cast<std::uintptr_t>(l.block->ptr));
            REQUIRE(it != blocks.end());
            REQUIRE(it->second == l.block->size);
            REQUIRE(l.block->size >= l.requested);
            bytes += std::int64_t(l.block->size);
            requested += std::int64_t(l.requested);
        }
        std::uintptr_t end = 0;  // no two live blocks overlap
        for (const auto& [at, size] : blocks) {
            REQUIRE(at >= end);
            end = at + size;
        }
        std::int64_t requested_incl_pending = 0;  // as in PyTorch, a block waiting for another stream still counts
        for (const auto& seg : snap) {
            reserved += std::int64_t(seg.total_size);
            for (const auto& b : seg.blocks) requested_incl_pending += std::int64_t(b.requested);
        }
        REQUIRE(s.allocation[0].current == std::int64_t(live.size()));
        REQUIRE(s.allocated_bytes[0].current == bytes);
        REQUIRE(s.requested_bytes[0].current == requested_incl_pending);
        REQUIRE(s.requested_bytes[0].current >= requested);
        REQUIRE(s.reserved_bytes[0].current == reserved);
        REQUIRE(s.segment[0].current == std::int64_t(snap.size()));
        REQUIRE(s.reserved_bytes[0].current >= s.allocated_bytes[0].current);
        for (const auto* st : {&s.allocation, &s.allocated_bytes, &s.reserved_bytes, &s.segment, &s.active})
            for (const auto& x : *st) REQUIRE(x.peak >= x.current);
        REQUIRE(s.allocation[0].current == s.allocation[1].current + s.allocation[2].current);
        peak_seen = std::max(peak_seen, bytes);
        REQUIRE(s.allocated_bytes[0].peak >= peak_seen);
    };
    unsigned char next_tag = 1;
    for (int op = 0; op < 3000; ++op) {
        const int kind = int(rng() % 100);
        if (kind < 50 || live.empty()) {
            const std::size_t n = random_size();
            auto s = streams[rng() % streams.size()];
            mem::Block* b = alloc->malloc(n, s);
            // Tag the first and last byte; an overlapping allocation would overwrite them.
            tessel::rt::memset_async(b->ptr, next_tag, 1, s);
            tessel::rt::memset_async(b->ptr + n - 1, next_tag, 1, s);
            live.push_back({b, n, next_tag});
            next_tag = next_tag == 255 ? 1 : next_tag + 1;
        } else if (kind < 90) {
            const std::size_t i = rng() % live.size();
            Live l = live[i];
            unsigned char first = 0, last = 0;
            tessel::rt::stream_synchronize(l.block->stream);
            tessel::rt::memcpy(&first, l.block->ptr, 1);
            tessel::rt::memcpy(&last, l.block->ptr + l.requested - 1, 1);
            REQUIRE(first == l.tag);
            REQUIRE(last == l.tag);
            if (rng() % 4 == 0) alloc->record_stream(l.block, streams[rng() % streams.size()], 0);
            alloc->free(l.block);
            live.erase(live.begin() + std::ptrdiff_t(i));
        } else if (kind < 95) {
            alloc->empty_cache();
        } else {
            tessel::rt::device_synchronize();
        }
        if (op % 10 == 0) check_invariants();
    }
    for (auto& l : live) alloc->free(l.block);
    live.clear();
    check_invariants();
    alloc->empty_cache();
    CHECK(alloc->stats().reserved_bytes[0].current == 0);
    for (std::size_t i = 1; i < streams.size(); ++i) tessel::rt::stream_destroy(streams[i]);
}

TEST_CASE("fragmentation: freed holes cannot serve a larger request; max_split_size keeps big blocks whole", "[memory]") {
    auto a = fresh();
    std::vector<mem::Block*> blocks;
    for (int i = 0; i < 6; ++i) blocks.push_back(a->malloc(6 * MiB, nullptr));  // two 20 MiB segments, 3 each
    for (int i = 0; i < 6; i += 2) a->free(blocks[std::size_t(i)]);
    auto s = a->stats();
    CHECK(s.reserved_bytes[0].current == std::int64_t(40 * MiB));
    CHECK(s.allocated_bytes[0].current == std::int64_t(18 * MiB));
    CHECK(a->largest_free_block() < 16 * MiB);
    mem::Block* big = a->malloc(16 * MiB, nullptr);  // no hole is large enough: a new segment
    CHECK(a->stats().segment[0].current == 3);
    a->free(big);
    for (int i = 1; i < 6; i += 2) a->free(blocks[std::size_t(i)]);
    a->empty_cache();

    mem::AllocatorConfig capped;
    capped.max_split_size = 8 * MiB;
    auto b = fresh(capped);
    mem::Block* huge = b->malloc(30 * MiB, nullptr);
    const void* huge_at = huge->ptr;
    b->free(huge);
    mem::Block* smaller = b->malloc(2 * MiB, nullptr);  // would split the 30 MiB block without the cap
    CHECK(static_cast<const void*>(smaller->ptr) != huge_at);
    CHECK(b->stats().max_split_size == std::int64_t(8 * MiB));
    b->free(smaller);
    b->empty_cache();
}

TEST_CASE("set_memory_fraction caps reservations with an OutOfMemoryError that says so", "[memory]") {
    auto a = fresh();
    const auto total = tessel::properties(tessel::Device{0}).total_memory;
    a->set_memory_fraction(double(64 * MiB) / double(total));
    mem::Block* ok = a->malloc(40 * MiB, nullptr);
    try {
        (void)a->malloc(40 * MiB, nullptr);
        FAIL("allocation above the memory fraction did not fail");
    } catch (const tessel::OutOfMemoryError& e) {
        const std::string msg = e.what();
        INFO(msg);
        CHECK(msg.find("tried to allocate 40.00 MiB") != std::string::npos);
        CHECK(msg.find("set_memory_fraction") != std::string::npos);
    }
    CHECK(a->stats().num_ooms == 1);
    CHECK_THROWS_AS(a->set_memory_fraction(1.5), tessel::InvalidArgument);
    a->free(ok);
    a->empty_cache();
}

TEST_CASE("host threads allocate and free concurrently", "[memory][threads]") {
    auto a = fresh();
    std::vector<std::thread> threads;
    std::atomic<int> errors{0};
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            std::mt19937 rng{unsigned(t)};
            std::vector<mem::Block*> mine;
            for (int i = 0; i < 500; ++i) {
                if (mine.empty() || rng() % 2) {
                    mine.push_back(a->malloc(1 + rng() % (3 * MiB), nullptr));
                } else {
                    a->free(mine.back());
                    mine.pop_back();
                }
            }
            for (auto* b : mine) a->free(b);
            if (a->stats().allocation[0].current < 0) ++errors;
        });
    for (auto& th : threads) th.join();
    CHECK(errors == 0);
    CHECK(a->stats().allocation[0].current == 0);
    CHECK(a->stats().allocated_bytes[0].current == 0);
    a->empty_cache();
    CHECK(a->stats().reserved_bytes[0].current == 0);
}

TEST_CASE("the public API: allocate, MemoryScope, summary, snapshot, bad pointers", "[memory]") {
    mem::empty_cache();
    void* outside = mem::allocate(3 * MiB);
    std::int64_t inner_peak = 0;
    {
        mem::MemoryScope scope;
        void* p = mem::allocate(5 * MiB);
        void* q = mem::allocate(MiB / 2);
        mem::deallocate(p);
        {
            mem::MemoryScope nested;
            void* r = mem::allocate(2 * MiB);
            CHECK(nested.peak_increase_bytes() == std::int64_t(2 * MiB));
            mem::deallocate(r);
        }
        mem::deallocate(q);
        inner_peak = scope.peak_increase_bytes();
    }
    CHECK(inner_peak == std::int64_t(5 * MiB + MiB / 2));
    const std::string summary = mem::memory_summary();
    CHECK(summary.find("allocated memory") != std::string::npos);
    CHECK(summary.find("reserved memory") != std::string::npos);
    CHECK(summary.find("from large pool") != std::string::npos);
    bool found = false;
    for (const auto& seg : mem::snapshot())
        for (std::uintptr_t at = seg.address; const auto& b : seg.blocks) {
            found |= at == reinterpret_cast<std::uintptr_t>(outside) && b.allocated && b.requested == 3 * MiB;
            at += b.size;
        }
    CHECK(found);
    CHECK(mem::allocate(0) == nullptr);
    int local = 0;
    CHECK_THROWS_AS(mem::deallocate(&local), tessel::InvalidArgument);
    mem::deallocate(outside);
    CHECK_THROWS_AS(mem::deallocate(outside), tessel::InvalidArgument);  // twice
}

TEST_CASE("TESSEL_ALLOC_CONF is parsed strictly", "[memory]") {
    const auto c = mem::AllocatorConfig::parse("max_split_size_mb:256,backend:async");
    CHECK(c.max_split_size == 256 * MiB);
    CHECK(c.backend == mem::Backend::async);
    CHECK_THROWS_AS(mem::AllocatorConfig::parse("max_split_size_mb:abc"), tessel::InvalidArgument);
    CHECK_THROWS_AS(mem::AllocatorConfig::parse("colour:blue"), tessel::InvalidArgument);
    CHECK_THROWS_AS(mem::AllocatorConfig::parse("backend:magic"), tessel::InvalidArgument);
}

#if defined(TESSEL_BACKEND_SIM)
TEST_CASE("at the device's capacity the cache is freed and retried, then OutOfMemoryError explains", "[.oom]") {
    // Run with TESSEL_SIM_MEMORY=64MiB (ctest does).
    REQUIRE(tessel::properties().total_memory == 64 * MiB);
    mem::empty_cache();
    void* a = mem::allocate(20 * MiB);
    void* b = mem::allocate(20 * MiB);
    mem::deallocate(a);                 // cached, not returned to the device
    void* c = mem::allocate(40 * MiB);  // fits only once the cache is released
    CHECK(mem::stats().num_alloc_retries == 1);
    try {
        (void)mem::allocate(10 * MiB);
        FAIL("allocation beyond the capacity did not fail");
    } catch (const tessel::OutOfMemoryError& e) {
        const std::string msg = e.what();
        std::printf("--- the OutOfMemoryError message at the sim's 64 MiB capacity ---\n%s\n---\n", msg.c_str());
        CHECK(msg.find("tried to allocate 10.00 MiB") != std::string::npos);
        CHECK(msg.find("64.00 MiB total") != std::string::npos);
        CHECK(msg.find("60.00 MiB allocated") != std::string::npos);
        CHECK(msg.find("reserved but unallocated") != std::string::npos);
        CHECK(msg.find("largest free cached block") != std::string::npos);
        CHECK(msg.find("empty_cache") != std::string::npos);
        CHECK(msg.find("max_split_size_mb") != std::string::npos);
    }
    CHECK(mem::stats().num_ooms == 1);
    mem::deallocate(b);
    mem::deallocate(c);
    void* d = mem::allocate(60 * MiB);  // recovers once memory is returned
    mem::deallocate(d);
    mem::empty_cache();
}
#endif
