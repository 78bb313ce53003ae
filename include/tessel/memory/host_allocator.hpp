// Pinned (page-locked) host memory with a cache, after PyTorch's CachingHostAllocator: sizes are
// rounded up to a power of two; a freed block is reused only once every stream recorded as using it
// (record_host_use, e.g. by an async copy) has passed the point where it was freed. Under
// AddressSanitizer in the sim, cached blocks and the slack past a request are poisoned (asan.hpp).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <optional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "../runtime/device.hpp"
#include "asan.hpp"
#include "allocator.hpp"
#include "block.hpp"
#include "stats.hpp"

namespace tessel::memory {

// The process's pinned-memory cache. Thread-safe.
class HostCachingAllocator {
public:
    static HostCachingAllocator& instance() {
        static HostCachingAllocator* a = new HostCachingAllocator();
        return *a;
    }

    void* allocate(std::size_t bytes) {
        if (bytes == 0) return nullptr;
        if (bytes > (std::numeric_limits<std::size_t>::max() >> 2))
            fail<OutOfMemoryError>("out of pinned host memory: cannot allocate ", bytes, " bytes");
        const std::size_t size = std::bit_ceil(std::max<std::size_t>(bytes, 512));
        std::lock_guard lk(m_);
        process_events();
        void* p = nullptr;
        if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
            p = it->second.back();
            it->second.pop_back();
        } else {
            p = rt::malloc_pinned(size);
            blocks_[p].size = size;
            stats_.reserved_bytes.increase(std::int64_t(size));
            ++stats_.num_host_alloc;
        }
        Block& b = blocks_[p];
        b.allocated = true;
        b.requested = bytes;
        stats_.allocation.increase(1);
        stats_.allocated_bytes.increase(std::int64_t(size));
        asan::set_owned(p, size, bytes);
        return p;
    }

    // Returns a block; if streams used it, it is reused only after they pass this point. A stream
    // whose point cannot be marked with an event (destroyed, or its device failing) is waited for
    // by synchronising its device, so the block is never lost: the cache is consistent and the
    // block reusable when the first such error is rethrown.
    void deallocate(void* p) {
        if (!p) return;
        std::lock_guard lk(m_);
        Block& b = find(p, "deallocate_host");
        require(b.allocated, "deallocate_host: pinned block ", p, " was already freed");
        b.allocated = false;
        b.requested = 0;
        stats_.allocation.decrease(1);
        stats_.allocated_bytes.decrease(std::int64_t(b.size));
        std::exception_ptr first;
        for (const auto& [s, dev] : b.streams) {
            try {
                record_free_event(p, b, s, dev);
            } catch (...) {
                if (!first) first = std::current_exception();
                detail::synchronize_for_free(dev);
            }
        }
        b.streams.clear();
        if (b.pending == 0) make_reusable(p, b);
        if (first) std::rethrow_exception(first);
    }

    // Declares that work queued on `stream` (of `device`; e.g. an async copy) uses the block at `p`.
    void record_use(void* p, rt::stream_t stream, int device) {
        std::lock_guard lk(m_);
        Block& b = find(p, "record_host_use");
        require(b.allocated, "record_host_use: pinned block ", p, " is not in use");
        for (const auto& u : b.streams)
            if (u.first == stream && u.second == device) return;
        b.streams.emplace_back(stream, device);
    }

    // True if `p` is the start of a block of this cache (in use or not).
    bool owns(const void* p) {
        std::lock_guard lk(m_);
        return blocks_.count(const_cast<void*>(p)) != 0;
    }

    // Frees every cached block no stream still uses. A block leaves the books before the runtime
    // frees it, so a failing free (a broken context) cannot leave a freed pointer in the cache; the
    // first error is rethrown once every block is handled.
    void empty_cache() {
        std::lock_guard lk(m_);
        while (!pending_.empty()) {
            const auto [e, p] = pending_.front();
            rt::event_synchronize(e);
            pending_.pop_front();
            event_done(e, p);
        }
        std::exception_ptr first;
        for (auto& [size, ptrs] : free_) {
            while (!ptrs.empty()) {
                void* p = ptrs.back();
                ptrs.pop_back();
                blocks_.erase(p);
                stats_.reserved_bytes.decrease(std::int64_t(size));
                ++stats_.num_host_free;
                asan::unpoison(p, size);  // the runtime frees it; ASan's allocator takes it back whole
                try {
                    rt::free_pinned(p);
                } catch (...) {
                    if (!first) first = std::current_exception();
                }
            }
        }
        if (first) std::rethrow_exception(first);
    }

    HostStats stats() {
        std::lock_guard lk(m_);
        return stats_;
    }

    // Every broken invariant of the cache, in words (empty when consistent): each block handed out,
    // waiting for the events it has, or listed once as reusable under its size; every statistic
    // equal to what the blocks add up to; under AddressSanitizer, reusable blocks and the slack past
    // a request poisoned. For tests and fuzzers.
    std::vector<std::string> check_invariants() {
        std::lock_guard lk(m_);
        std::vector<std::string> bad;
        auto report = [&](const auto&... parts) { bad.push_back(tessel::detail::concat("pinned cache: ", parts...)); };
        std::unordered_map<const void*, int> listed, events;
        for (const auto& [size, ptrs] : free_)
            for (void* p : ptrs) {
                ++listed[p];
                auto it = blocks_.find(p);
                if (it == blocks_.end()) report("reusable pointer ", p, " is not a block of the cache");
                else if (it->second.size != size) report("block ", p, " of ", it->second.size, " bytes is listed as reusable under ", size);
            }
        for (const auto& [e, p] : pending_) {
            ++events[p];
            if (!blocks_.count(p)) report("an event waits on pointer ", p, ", which is not a block of the cache");
        }
        std::int64_t allocation = 0, allocated_bytes = 0, reserved_bytes = 0;
        for (const auto& [p, b] : blocks_) {
            if (!std::has_single_bit(b.size) || b.size < 512) report("block ", p, " has ", b.size, " bytes, not a power of two >= 512");
            if (events[p] != b.pending) report("block ", p, " counts ", b.pending, " pending event(s) but ", events[p], " are queued for it");
            const bool reusable = !b.allocated && b.pending == 0;
            if (reusable && listed[p] != 1) report("free block ", p, " is listed ", listed[p], " time(s) as reusable instead of once");
            if (!reusable && listed[p] != 0) report("block ", p, " is listed as reusable while ", b.allocated ? "handed out" : "waiting for events");
            if (!b.allocated && !b.streams.empty()) report("freed block ", p, " still lists ", b.streams.size(), " stream use(s)");
            if (b.allocated ? (b.requested == 0 || b.requested > b.size) : b.requested != 0)
                report("block ", p, " of ", b.size, " bytes counts ", b.requested, " requested bytes while ", b.allocated ? "handed out" : "free");
            if (b.allocated) {
                ++allocation;
                allocated_bytes += std::int64_t(b.size);
            }
            reserved_bytes += std::int64_t(b.size);
            if constexpr (asan::enabled) {  // host poisoning is synchronous: always settled
                const char* c = static_cast<const char*>(p);
                if (reusable && !asan::is_poisoned(c)) report("reusable block ", p, " is not poisoned");
                if (b.allocated && b.requested > 0 && b.requested <= b.size) {
                    if (asan::is_poisoned(c) || asan::is_poisoned(c + b.requested - 1))
                        report("handed-out block ", p, " has poisoned bytes within its ", b.requested, " requested");
                    if (b.requested < b.size && !asan::is_poisoned(c + b.requested))
                        report("handed-out block ", p, " has unpoisoned slack past its ", b.requested, " requested bytes");
                }
            }
        }
        auto compare = [&](const char* name, const Stat& st, std::int64_t expected) {
            if (st.current != expected) report("stats.", name, ".current is ", st.current, " but the blocks add up to ", expected);
            if (st.peak < st.current) report("stats.", name, ".peak ", st.peak, " is below current ", st.current);
            if (st.allocated - st.freed != st.current)
                report("stats.", name, ": allocated ", st.allocated, " - freed ", st.freed, " != current ", st.current);
        };
        compare("allocation", stats_.allocation, allocation);
        compare("allocated_bytes", stats_.allocated_bytes, allocated_bytes);
        compare("reserved_bytes", stats_.reserved_bytes, reserved_bytes);
        return bad;
    }

private:
    struct Block {
        std::size_t size = 0;
        std::size_t requested = 0;  // what the caller asked for (0 while free)
        bool allocated = false;
        int pending = 0;                      // events not yet passed
        std::vector<std::pair<rt::stream_t, int>> streams;  // recorded users (stream, device) since the last allocation
    };

    Block& find(void* p, const char* what) {
        auto it = blocks_.find(p);
        require(it != blocks_.end(), what, ": pointer ", p, " is not the start of a block of tessel's pinned-memory cache");
        return it->second;
    }

    void record_free_event(void* p, Block& b, rt::stream_t s, int dev) {
        DeviceGuard g(Device{dev});  // events of one device for streams of that device
        rt::event_t e = rt::event_create(false);
        try {
            pending_.emplace_back(e, p);
            try {
                rt::event_record(e, s);
            } catch (...) {
                pending_.pop_back();
                throw;
            }
        } catch (...) {
            (void)rt::api::cudaEventDestroy(e);  // the error being thrown is the one to report
            throw;
        }
        ++b.pending;
    }

    // A block no stream uses any more: reusable, and nobody may touch it until it is handed out.
    void make_reusable(void* p, const Block& b) {
        asan::poison(p, b.size);
        free_[b.size].push_back(p);
    }

    void process_events() {
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (!rt::event_query(it->first)) {
                ++it;
                continue;
            }
            const auto [e, p] = *it;
            it = pending_.erase(it);
            event_done(e, p);
        }
    }

    void event_done(rt::event_t e, void* p) {
        Block& b = blocks_[p];
        if (--b.pending == 0 && !b.allocated) make_reusable(p, b);  // before anything else can throw
        rt::event_destroy(e);
    }

    std::mutex m_;
    std::unordered_map<void*, Block> blocks_;
    std::map<std::size_t, std::vector<void*>> free_;  // reusable blocks by size
    std::deque<std::pair<rt::event_t, void*>> pending_;
    HostStats stats_;
};

// The definitions of memory/allocator.hpp's pinned-memory functions, compiled once per program
// where the runtime is compiled separately (core/linkage.hpp).
#if TESSEL_DEFINE_RUNTIME
TESSEL_API void* allocate_host(std::size_t bytes) { return HostCachingAllocator::instance().allocate(bytes); }
TESSEL_API void deallocate_host(void* p) { HostCachingAllocator::instance().deallocate(p); }
TESSEL_API void record_host_use(void* p, rt::stream_t stream, std::optional<Device> device) {
    const int d = tessel::detail::checked_stream_device("record_host_use", stream, device);
    HostCachingAllocator::instance().record_use(p, stream, d);
}
TESSEL_API bool owns_host(const void* p) { return HostCachingAllocator::instance().owns(p); }
TESSEL_API HostStats host_stats() { return HostCachingAllocator::instance().stats(); }
TESSEL_API void empty_host_cache() { HostCachingAllocator::instance().empty_cache(); }
TESSEL_API std::vector<std::string> check_host_invariants() { return HostCachingAllocator::instance().check_invariants(); }
#endif  // TESSEL_DEFINE_RUNTIME

}  // namespace tessel::memory
