// Pinned (page-locked) host memory with a cache, after PyTorch's CachingHostAllocator: sizes are
// rounded up to a power of two; a freed block is reused only once every stream recorded as using it
// (record_host_use, e.g. by an async copy) has passed the point where it was freed.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "../runtime/device.hpp"
#include "stats.hpp"

namespace tessel::memory {

// Statistics of the pinned host cache.
struct HostStats {
    Stat allocation;       // blocks handed out
    Stat allocated_bytes;  // their (rounded) bytes
    Stat reserved_bytes;   // bytes of pinned memory held, in use or cached
    std::int64_t num_host_alloc = 0, num_host_free = 0;
};

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
            blocks_[p] = Block{size};
            stats_.reserved_bytes.increase(std::int64_t(size));
            ++stats_.num_host_alloc;
        }
        blocks_[p].allocated = true;
        stats_.allocation.increase(1);
        stats_.allocated_bytes.increase(std::int64_t(size));
        return p;
    }

    // Returns a block; if streams used it, it is reused only after they pass this point.
    void deallocate(void* p) {
        if (!p) return;
        std::lock_guard lk(m_);
        Block& b = find(p, "deallocate_host");
        require(b.allocated, "deallocate_host: pinned block ", p, " was already freed");
        b.allocated = false;
        stats_.allocation.decrease(1);
        stats_.allocated_bytes.decrease(std::int64_t(b.size));
        if (b.streams.empty()) {
            free_[b.size].push_back(p);
            return;
        }
        for (const auto& [s, dev] : b.streams) {
            DeviceGuard g(Device{dev});  // events of one device for streams of that device
            rt::event_t e = rt::event_create(false);
            rt::event_record(e, s);
            ++b.pending;
            pending_.emplace_back(e, p);
        }
        b.streams.clear();
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

    // Frees every cached block no stream still uses.
    void empty_cache() {
        std::lock_guard lk(m_);
        while (!pending_.empty()) {
            const auto [e, p] = pending_.front();
            rt::event_synchronize(e);
            pending_.pop_front();
            event_done(e, p);
        }
        for (auto& [size, ptrs] : free_) {
            for (void* p : ptrs) {
                rt::free_pinned(p);
                blocks_.erase(p);
                stats_.reserved_bytes.decrease(std::int64_t(size));
                ++stats_.num_host_free;
            }
            ptrs.clear();
        }
    }

    HostStats stats() {
        std::lock_guard lk(m_);
        return stats_;
    }

private:
    struct Block {
        std::size_t size = 0;
        bool allocated = false;
        int pending = 0;                      // events not yet passed
        std::vector<std::pair<rt::stream_t, int>> streams;  // recorded users (stream, device) since the last allocation
    };

    Block& find(void* p, const char* what) {
        auto it = blocks_.find(p);
        require(it != blocks_.end(), what, ": pointer ", p, " is not the start of a block of tessel's pinned-memory cache");
        return it->second;
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
        rt::event_destroy(e);
        Block& b = blocks_[p];
        if (--b.pending == 0 && !b.allocated) free_[b.size].push_back(p);
    }

    std::mutex m_;
    std::unordered_map<void*, Block> blocks_;
    std::map<std::size_t, std::vector<void*>> free_;  // reusable blocks by size
    std::deque<std::pair<rt::event_t, void*>> pending_;
    HostStats stats_;
};

// Pinned host memory from the cache.
inline void* allocate_host(std::size_t bytes) { return HostCachingAllocator::instance().allocate(bytes); }
inline void deallocate_host(void* p) { HostCachingAllocator::instance().deallocate(p); }
// Declares that work on `stream` (of `device`, by default the current one) uses the pinned block `p`
// (its reuse then waits for that work).
inline void record_host_use(void* p, rt::stream_t stream, std::optional<Device> device = std::nullopt) {
    HostCachingAllocator::instance().record_use(p, stream, (device ? *device : current_device()).index);
}
inline bool owns_host(const void* p) { return HostCachingAllocator::instance().owns(p); }
inline HostStats host_stats() { return HostCachingAllocator::instance().stats(); }
inline void empty_host_cache() { HostCachingAllocator::instance().empty_cache(); }

}  // namespace tessel::memory
