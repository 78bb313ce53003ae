// The caching device allocator: sizes and pools, reuse within a stream, split and coalesce,
// record_stream, a randomized model test against invariants that must hold (and the invariant
// checker itself), fragmentation, memory fractions, concurrent host threads, MemoryScope, frees that
// fail half-way (the block is neither lost nor miscounted), AddressSanitizer poisoning in stream
// order, and (in its own ctest entry) OOM at the sim's capacity with recovery.
#include <tessel/memory/allocator.hpp>
#include <tessel/memory/caching_allocator.hpp>  // the allocators themselves
#include <tessel/runtime/launch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
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

// Fails the test with every broken invariant listed.
void require_consistent(mem::DeviceCachingAllocator& a) {
    const auto broken = a.check_invariants();
    std::string all;
    for (const auto& v : broken) all += v + "\n";
    INFO(all);
    REQUIRE(broken.empty());
}

bool mentions(const std::vector<std::string>& lines, const std::string& fragment) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(fragment) != std::string::npos; });
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
        require_consistent(*alloc);
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

TEST_CASE("check_invariants names each kind of corruption, and nothing in a consistent cache", "[memory][invariants]") {
    auto a = fresh();
    auto s = tessel::rt::stream_create(true);
    mem::Block* x = a->malloc(4096, nullptr);
    mem::Block* y = a->malloc(1000, nullptr);
    mem::Block* big = a->malloc(12 * MiB, s);
    require_consistent(*a);

    x->size += 512;  // now overlaps y
    auto broken = a->check_invariants();
    CHECK(mentions(broken, "is not followed contiguously"));
    CHECK(mentions(broken, "stats.allocated_bytes[all].current is"));
    CHECK(mentions(broken, "stats.reserved_bytes[small].current is"));
    x->size -= 512;

    y->allocated = false;  // what a free that gave up half-way used to leave behind
    broken = a->check_invariants();
    CHECK(mentions(broken, "is neither handed out, nor free in a pool, nor waiting for events: it is lost"));
    CHECK(mentions(broken, "stats.allocation[all].current is 3 but the blocks add up to 2"));
    y->allocated = true;

    y->next->prev = nullptr;  // a broken back link
    broken = a->check_invariants();
    CHECK(mentions(broken, "the next block's prev link does not point back"));
    y->next->prev = y;

    y->segment += 1000;
    CHECK(mentions(a->check_invariants(), "says segment"));
    y->segment -= 1000;

    y->requested = y->size + 1;
    CHECK(mentions(a->check_invariants(), "was requested with"));
    y->requested = 1000;
    require_consistent(*a);

    a->free(x);
    a->free(y);
    a->free(big);
    require_consistent(*a);
    a->empty_cache();
    require_consistent(*a);
    CHECK(a->stats().reserved_bytes[0].current == 0);
    tessel::rt::stream_destroy(s);
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
    a->set_memory_fraction(double(50 * MiB) / double(total));
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
    // A small request whose 20 MiB segment the cap refuses: the message blames the cap, not cudaMalloc
    // (which was never called).
    try {
        (void)a->malloc(6 * MiB, nullptr);
        FAIL("a segment past the memory fraction was made");
    } catch (const tessel::OutOfMemoryError& e) {
        const std::string msg = e.what();
        INFO(msg);
        CHECK(msg.find("tried to allocate 6.00 MiB, which needs a new segment of 20.00 MiB; that would take tessel's "
                       "reservations (40.00 MiB) past set_memory_fraction's cap of 50.00 MiB") != std::string::npos);
        CHECK(msg.find("cudaMalloc") == std::string::npos);
    }
    CHECK_THROWS_AS(a->set_memory_fraction(1.5), tessel::InvalidArgument);
    a->free(ok);
    a->empty_cache();
}

TEST_CASE("host threads allocate and free concurrently", "[memory][threads]") {
    auto a = fresh();
    std::vector<std::thread> threads;
    std::atomic<int> errors{0}, overlaps{0};
    // Every live block's bytes [start, end): a block handed out while another thread holds any of
    // its bytes is an overlap. A block leaves the set before it is freed, so its reuse is no overlap.
    std::mutex live_m;
    std::map<std::uintptr_t, std::uintptr_t> live;
    const auto take = [&](std::size_t bytes) {
        mem::Block* b = a->malloc(bytes, nullptr);
        const auto start = reinterpret_cast<std::uintptr_t>(b->ptr), end = start + bytes;
        std::lock_guard lk(live_m);
        const auto next = live.lower_bound(start);
        if (next != live.end() && next->first < end) ++overlaps;
        if (next != live.begin() && std::prev(next)->second > start) ++overlaps;
        live.emplace(start, end);
        return b;
    };
    const auto give = [&](mem::Block* b) {
        {
            std::lock_guard lk(live_m);
            live.erase(reinterpret_cast<std::uintptr_t>(b->ptr));
        }
        a->free(b);
    };
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&, t] {
            std::mt19937 rng{unsigned(t)};
            std::vector<mem::Block*> mine;
            for (int i = 0; i < 500; ++i) {
                if (mine.empty() || rng() % 2) {
                    mine.push_back(take(1 + rng() % (3 * MiB)));
                } else {
                    give(mine.back());
                    mine.pop_back();
                }
            }
            for (auto* b : mine) give(b);
            if (a->stats().allocation[0].current < 0) ++errors;
        });
    for (auto& th : threads) th.join();
    CHECK(errors == 0);
    CHECK(overlaps == 0);
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
    // Every line of the table has its width, also with counters far beyond a test's.
    mem::DeviceStats big = mem::stats();
    big.num_device_alloc = 123456789012;
    big.num_alloc_retries = 9876543210;
    big.allocated_bytes[mem::StatPool::all].peak = std::int64_t(1) << 45;
    big.allocation[mem::StatPool::large_pool].allocated = 99999999999999;
    for (const std::string& table : {summary, mem::memory_summary(63, big)}) {
        std::size_t lines = 0;
        for (std::size_t at = 0, nl; (nl = table.find('\n', at)) != std::string::npos; at = nl + 1, ++lines)
            CHECK(nl - at == mem::kSummaryWidth);
        CHECK(lines == 42);
    }
    bool found = false;
    for (const auto& seg : mem::snapshot())
        for (std::uintptr_t at = seg.address; const auto& b : seg.blocks) {
            found |= at == reinterpret_cast<std::uintptr_t>(outside) && b.allocated && b.requested == 3 * MiB;
            at += b.size;
        }
    CHECK(found);
    CHECK(mem::allocate(0) == nullptr);
    CHECK_NOTHROW(mem::record_stream(mem::allocate(0), tessel::current_stream().handle()));  // nothing to keep, as torch's
    int local = 0;
    CHECK_THROWS_AS(mem::deallocate(&local), tessel::InvalidArgument);
    mem::deallocate(outside);
    CHECK_THROWS_AS(mem::deallocate(outside), tessel::InvalidArgument);  // twice
}

TEST_CASE("record_stream racing a free of the same pointer on another thread notes the use or says the pointer is gone", "[memory][stream]") {
    // The caller's race (through the raw API only: a Tensor holds its memory while it records a
    // stream), but it must not reach a block the free has merged into its neighbours or empty_cache
    // has deleted: record_stream looks the pointer up again under the device's lock.
    const tessel::Stream other = tessel::Stream::create();
    int noted = 0, gone = 0;
    for (int i = 0; i < 300; ++i) {
        void* p = mem::allocate(std::size_t(1024 + 512 * (i % 7)));
        std::atomic<int> ready{0};
        std::exception_ptr freer_error;
        std::jthread freer([&] {  // joined however this iteration ends
            ready.fetch_add(1);
            while (ready.load() < 2) std::this_thread::yield();
            try {
                mem::deallocate(p);
                mem::empty_cache();
            } catch (...) {
                freer_error = std::current_exception();
            }
        });
        ready.fetch_add(1);
        while (ready.load() < 2) std::this_thread::yield();
        try {
            mem::record_stream(p, other.handle());
            ++noted;
        } catch (const tessel::InvalidArgument& e) {
            CHECK_THAT(e.what(), Catch::Contains("record_stream: pointer"));
            ++gone;
        }
        freer.join();
        if (freer_error) std::rethrow_exception(freer_error);
    }
    INFO(noted << " uses noted, " << gone << " pointers already gone");
    CHECK(noted + gone == 300);
    other.synchronize();
}

#if defined(TESSEL_BACKEND_SIM)  // the sim rejects destroyed stream handles deterministically
namespace {
// An allocator whose block `b` (on stream `home`) also listed `other` with record_stream.
struct FailedFree {
    std::unique_ptr<mem::DeviceCachingAllocator> a = fresh();
    tessel::rt::stream_t home = tessel::rt::stream_create(true);
    ~FailedFree() { tessel::rt::stream_destroy(home); }

    // After a free that threw: nothing lost, nothing miscounted, the memory reusable at once (once
    // events recorded on live streams have passed) and returned by empty_cache.
    void check_recovered(const void* at, std::size_t bytes) {
        require_consistent(*a);
        CHECK(a->stats().allocation[0].current == 0);
        CHECK(a->stats().allocated_bytes[0].current == 0);
        mem::Block* again = a->malloc(bytes, home);
        CHECK(static_cast<const void*>(again->ptr) == at);
        require_consistent(*a);
        a->free(again);
        const auto s = a->stats();
        CHECK(s.requested_bytes[0].current == 0);
        CHECK(s.active[0].current == 0);
        a->empty_cache();
        require_consistent(*a);
        CHECK(a->stats().reserved_bytes[0].current == 0);
        CHECK(a->stats().segment[0].current == 0);
    }
};
__global__ void fault_in_kernel(int* x) {
    if (threadIdx.x == 0) throw std::runtime_error("deliberate fault");
    x[threadIdx.x] = 1;
}
}  // namespace

TEST_CASE("a free whose recorded stream was destroyed throws, and the block is reusable", "[memory][failure]") {
    FailedFree f;
    mem::Block* b = f.a->malloc(3000, f.home);
    const void* at = b->ptr;
    auto gone = tessel::rt::stream_create(true);
    f.a->record_stream(b, gone, 0);
    tessel::rt::stream_destroy(gone);
    try {
        f.a->free(b);
        FAIL("a free that cannot record its event on a destroyed stream did not report it");
    } catch (const tessel::CudaError& e) {
        CHECK(std::string(e.what()).find("not a live stream") != std::string::npos);
    }
    f.check_recovered(at, 3000);
}

TEST_CASE("a free with a bogus stream among live ones still waits for the live ones", "[memory][failure]") {
    FailedFree f;
    const int n = 1 << 14;
    tessel::testing::DeviceArray<int> y(n);
    auto busy = tessel::rt::stream_create(true);
    mem::Block* b = f.a->malloc(n * sizeof(int), f.home);
    const void* at = b->ptr;
    tessel::rt::memset_async(b->ptr, 0, n * sizeof(int), f.home);
    tessel::rt::stream_synchronize(f.home);
    tessel::launch(tessel::testing::slow_copy<int>, 4, 256, 0, busy, reinterpret_cast<int*>(b->ptr), y.data(), n, 300);
    f.a->record_stream(b, reinterpret_cast<tessel::rt::stream_t>(std::uintptr_t(0xdead0)), 0);
    f.a->record_stream(b, busy, 0);
    CHECK_THROWS_AS(f.a->free(b), tessel::CudaError);
    // The bogus stream's device was synchronised, which covers `busy`; the block may still wait
    // for busy's event, which the next allocation collects.
    require_consistent(*f.a);
    f.check_recovered(at, n * sizeof(int));
    tessel::rt::stream_destroy(busy);
}

TEST_CASE("a free whose recorded stream names a device that does not exist throws, and the block is reusable", "[memory][failure]") {
    FailedFree f;
    mem::Block* b = f.a->malloc(MiB + 1, f.home);  // the large pool this time
    const void* at = b->ptr;
    f.a->record_stream(b, f.home, 7);  // the public record_stream rejects this; the allocator must survive it
    CHECK_THROWS_AS(f.a->free(b), tessel::InvalidArgument);
    f.check_recovered(at, MiB + 1);
}

TEST_CASE("a block whose own stream was destroyed is freed without error", "[memory][failure]") {
    auto a = fresh();
    auto s = tessel::rt::stream_create(true);
    mem::Block* b = a->malloc(5000, s);
    tessel::rt::memset_async(b->ptr, 1, 5000, s);
    tessel::rt::stream_destroy(s);
    a->free(b);  // no stream operation is needed: the block goes back to its (dead) stream's pool
    require_consistent(*a);
    a->empty_cache();
    require_consistent(*a);
    CHECK(a->stats().reserved_bytes[0].current == 0);
}

TEST_CASE("empty_cache that meets an earlier kernel's fault returns every segment, then reports the fault", "[memory][failure]") {
    auto a = fresh();
    mem::Block* x = a->malloc(MiB, nullptr);
    mem::Block* y = a->malloc(12 * MiB, nullptr);
    tessel::launch(fault_in_kernel, 1, 32, 0, nullptr, reinterpret_cast<int*>(x->ptr));
    a->free(x);
    a->free(y);
    try {
        a->empty_cache();  // the sim's cudaFree synchronises the device and finds the fault
        FAIL("the kernel's fault was not reported");
    } catch (const tessel::CudaError& e) {
        CHECK(std::string(e.what()).find("deliberate fault") != std::string::npos);
    }
    require_consistent(*a);
    const auto s = a->stats();
    CHECK(s.reserved_bytes[0].current == 0);
    CHECK(s.segment[0].current == 0);
    CHECK(s.num_device_free == 2);
    mem::Block* z = a->malloc(MiB, nullptr);  // the device is usable again
    a->free(z);
    a->empty_cache();
    require_consistent(*a);
}

namespace {
// Holds its stream until the host sets *gate.
__global__ void wait_for_gate(const std::atomic<int>* gate) {
    while (gate->load() == 0) std::this_thread::yield();
}
}  // namespace

TEST_CASE("under AddressSanitizer the cache poisons what no caller owns, in stream order", "[memory][asan]") {
    if (!mem::asan::enabled) {
        SUCCEED("poisoning is compiled only into the sim under AddressSanitizer");
        return;
    }
    auto a = fresh();
    auto s = tessel::rt::stream_create(true);
    mem::Block* x = a->malloc(100, s);
    const char* p = x->ptr;
    tessel::rt::stream_synchronize(s);
    CHECK_FALSE(mem::asan::is_poisoned(p));
    CHECK_FALSE(mem::asan::is_poisoned(p + 99));
    CHECK(mem::asan::is_poisoned(p + 100));  // the slack of the rounded 512-byte block
    CHECK(mem::asan::is_poisoned(p + 511));
    CHECK(mem::asan::is_poisoned(p + 512));  // the rest of the segment
    CHECK(mem::asan::is_poisoned(p + mem::kSmallBuffer - 1));
    require_consistent(*a);

    // Freed while work queued before the free may still use it: poisoned only once the stream gets there.
    std::atomic<int> gate{0};
    tessel::launch(wait_for_gate, 1, 1, 0, s, static_cast<const std::atomic<int>*>(&gate));
    a->free(x);
    CHECK_FALSE(mem::asan::is_poisoned(p));
    mem::Block* y = a->malloc(40, s);  // the same block, smaller: its new slack was the old owner's
    REQUIRE(static_cast<const void*>(y->ptr) == p);
    CHECK_FALSE(mem::asan::is_poisoned(p + 39));  // the new owner's bytes at once
    CHECK_FALSE(mem::asan::is_poisoned(p + 99));  // the old owner's until the stream passes the free
    gate = 1;
    tessel::rt::stream_synchronize(s);
    CHECK_FALSE(mem::asan::is_poisoned(p + 39));
    CHECK(mem::asan::is_poisoned(p + 40));
    CHECK(mem::asan::is_poisoned(p + 99));
    require_consistent(*a);

    a->free(y);
    tessel::rt::stream_synchronize(s);
    CHECK(mem::asan::is_poisoned(p));
    require_consistent(*a);
    a->empty_cache();  // unpoisons the segment before the runtime takes it back
    tessel::rt::stream_destroy(s);
}
#endif  // TESSEL_BACKEND_SIM

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
        (void)mem::allocate(6 * MiB);  // cut from a 20 MiB segment, which does not fit
        FAIL("allocation beyond the capacity did not fail");
    } catch (const tessel::OutOfMemoryError& e) {
        const std::string msg = e.what();
        std::printf("--- the OutOfMemoryError message at the sim's 64 MiB capacity ---\n%s\n---\n", msg.c_str());
        CHECK(msg.find("tried to allocate 6.00 MiB (cudaMalloc was asked for a segment of 20.00 MiB)") != std::string::npos);
        CHECK(msg.find("64.00 MiB total") != std::string::npos);
        CHECK(msg.find("60.00 MiB allocated") != std::string::npos);
        CHECK(msg.find("reserved but unallocated") != std::string::npos);
        CHECK(msg.find("largest free cached block") != std::string::npos);
        CHECK(msg.find("empty_cache") != std::string::npos);
        CHECK(msg.find("max_split_size_mb") != std::string::npos);
    }
    CHECK(mem::stats().num_ooms == 1);
    // A size no device holds is refused before the pool and counted too.
    CHECK_THROWS_WITH(mem::allocate((std::size_t(1) << 50) + 1), Catch::Contains("more than any device holds"));
    CHECK(mem::stats().num_ooms == 2);
    mem::deallocate(b);
    mem::deallocate(c);
    void* d = mem::allocate(60 * MiB);  // recovers once memory is returned
    mem::deallocate(d);
    mem::empty_cache();
}

// The retry waits for other streams' events: a block that another stream was still using comes
// back to the pool, inside a segment still partly in use (so not released), and serves the request
// instead of an OutOfMemoryError.
TEST_CASE("a block another stream releases during the out-of-memory retry serves the request", "[.oom]") {
    REQUIRE(tessel::properties().total_memory == 64 * MiB);
    mem::empty_cache();
    const tessel::Stream other = tessel::Stream::create();
    void* x = mem::allocate(6 * MiB);
    void* y = mem::allocate(6 * MiB);
    void* w = mem::allocate(8 * MiB);  // x, y and w fill one 20 MiB segment
    std::atomic<int> gate{0};
    tessel::launch(wait_for_gate, 1, 1, 0, other.handle(), static_cast<const std::atomic<int>*>(&gate));  // holds `other`
    mem::record_stream(x, other.handle());
    mem::deallocate(x);                 // an event on `other`: x returns to the pool once it passes
    void* z = mem::allocate(40 * MiB);  // 60 MiB reserved: no room for another 20 MiB segment
    const auto before = mem::stats();
    std::thread opener([&] {            // the retry waits for `other`; let it pass a moment later
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        gate = 1;
    });
    void* again = mem::allocate(6 * MiB);  // fails, waits for `other`, and finds x's block
    opener.join();
    CHECK(again == x);
    CHECK(mem::stats().num_alloc_retries == before.num_alloc_retries + 1);
    CHECK(mem::stats().num_ooms == before.num_ooms);
    for (void* p : {again, y, w, z}) mem::deallocate(p);
    mem::empty_cache();
    CHECK(mem::check_invariants().empty());
}
#endif
