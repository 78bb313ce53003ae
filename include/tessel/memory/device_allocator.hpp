// The caching allocator of one device, after PyTorch's CUDACachingAllocator: requests are rounded to
// 512 bytes; requests up to 1 MiB come from 2 MiB segments (small pool), larger ones from 20 MiB
// segments (1-10 MiB) or their own segment rounded to 2 MiB; a free block is reused by best fit
// within its stream, split when much larger than needed, and coalesced with free neighbours when
// freed. A block used on other streams (record_stream) returns to the pool only after those
// streams pass the point where it was freed. When cudaMalloc fails, the cache is released and the
// allocation retried before OutOfMemoryError.
#pragma once

#include <cstddef>
#include <deque>
#include <limits>
#include <mutex>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../runtime/device.hpp"
#include "block.hpp"
#include "config.hpp"
#include "stats.hpp"

namespace tessel::memory {

inline constexpr std::size_t kMinBlockSize = 512;         // all sizes are rounded to this
inline constexpr std::size_t kSmallSize = 1 << 20;        // largest "small" request
inline constexpr std::size_t kSmallBuffer = 2 << 20;      // small-pool segment size
inline constexpr std::size_t kLargeBuffer = 20 << 20;     // segment for requests of 1-10 MiB
inline constexpr std::size_t kMinLargeAlloc = 10 << 20;   // larger requests get their own segment
inline constexpr std::size_t kRoundLarge = 2 << 20;       // ... rounded to this

inline std::size_t round_size(std::size_t n) {
    return n < kMinBlockSize ? kMinBlockSize : kMinBlockSize * ((n + kMinBlockSize - 1) / kMinBlockSize);
}
inline std::size_t segment_size(std::size_t rounded) {
    if (rounded <= kSmallSize) return kSmallBuffer;
    if (rounded < kMinLargeAlloc) return kLargeBuffer;
    return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

// One block of a snapshot (snapshot()): where it is and what state it is in.
struct BlockInfo {
    std::size_t size = 0, requested = 0;
    bool allocated = false, active = false;  // active: allocated, or waiting for other streams
};
// One segment (one cudaMalloc) of a snapshot, with its blocks in address order.
struct SegmentInfo {
    int device = 0;
    std::uintptr_t address = 0;
    std::size_t total_size = 0, allocated_size = 0, active_size = 0;
    rt::stream_t stream = nullptr;
    bool small_pool = false;
    std::vector<BlockInfo> blocks;
};

// The allocator of one device. Thread-safe.
class DeviceCachingAllocator {
public:
    explicit DeviceCachingAllocator(int device, const AllocatorConfig& config = AllocatorConfig::from_env())
        : device_(device), config_(config) {
        if (config_.max_split_size != std::numeric_limits<std::size_t>::max())
            stats_.max_split_size = std::int64_t(config_.max_split_size);
    }
    // Returns the cache and the pooled events; blocks still handed out stay with their owners.
    ~DeviceCachingAllocator() {
        try {
            std::lock_guard lk(m_);
            release_cached_blocks();
            for (auto& [dev, events] : event_pool_) {
                DeviceGuard g(Device{dev});
                for (rt::event_t e : events) rt::event_destroy(e);
            }
        } catch (...) {  // a destructor must not throw; the runtime may already be gone at exit
        }
    }
    DeviceCachingAllocator(const DeviceCachingAllocator&) = delete;
    DeviceCachingAllocator& operator=(const DeviceCachingAllocator&) = delete;

    // A block of at least `bytes` for use on `stream`. Throws OutOfMemoryError when even an empty
    // cache leaves too little device memory.
    Block* malloc(std::size_t bytes, rt::stream_t stream) {
        if (bytes > std::numeric_limits<std::size_t>::max() / 2) {  // rounding would overflow
            std::lock_guard lk(m_);
            ++stats_.num_ooms;
            throw OutOfMemoryError(oom_message(bytes));
        }
        std::lock_guard lk(m_);
        process_events();
        const std::size_t size = round_size(bytes);
        BlockPool& pool = size <= kSmallSize ? small_ : large_;
        Block* block = take_free_block(pool, size, stream);
        if (!block) {
            const std::size_t seg = segment_size(size);
            block = new_segment(pool, seg, stream);
            if (!block) {  // free what the cache holds and try once more
                release_cached_blocks();
                ++stats_.num_alloc_retries;
                block = new_segment(pool, seg, stream);
            }
            if (!block) {
                ++stats_.num_ooms;
                throw OutOfMemoryError(oom_message(bytes));
            }
        }
        return hand_out(block, pool, size, bytes);
    }

    // Returns a block. If other streams used it, it waits in the pool's limbo until they pass here.
    void free(Block* block) {
        std::lock_guard lk(m_);
        block->allocated = false;
        const bool small = block->pool->is_small;
        stat_decrease(stats_.allocation, small, 1);
        stat_decrease(stats_.allocated_bytes, small, std::int64_t(block->size));
        if (block->stream_uses.empty()) {
            free_block(block);
            return;
        }
        try {
            insert_events(block);
        } catch (const std::exception& e) {
            // The other streams cannot be waited for by event (a destroyed stream?): wait for the
            // whole device instead, so the block is never lost from the pools.
            std::fprintf(stderr, "tessel: waiting for device %d instead of recorded streams: %s\n", device_, e.what());
            try {
                DeviceGuard g(Device{device_});
                rt::device_synchronize();
            } catch (...) {
            }
            if (block->event_count == 0) free_block(block);
        }
    }

    // Marks `block` as used by `stream` (of `stream_device`) too, so a free waits for work queued there.
    void record_stream(Block* block, rt::stream_t stream, int stream_device) {
        std::lock_guard lk(m_);
        require(block->allocated, "record_stream: the block at ", static_cast<void*>(block->ptr), " is not in use");
        if (stream == block->stream && stream_device == device_) return;
        const StreamUse use{stream, stream_device};
        for (const StreamUse& u : block->stream_uses)
            if (u == use) return;
        block->stream_uses.push_back(use);
    }

    // Returns every cached segment with no block in use to the runtime.
    void empty_cache() {
        std::lock_guard lk(m_);
        release_cached_blocks();
    }

    DeviceStats stats() {
        std::lock_guard lk(m_);
        return stats_;
    }
    void reset_peak_stats() {
        std::lock_guard lk(m_);
        stats_.reset_peaks();
    }

    // Caps the memory this allocator reserves at `fraction` of the device's total.
    void set_memory_fraction(double fraction) {
        require(fraction > 0.0 && fraction <= 1.0, "set_memory_fraction: fraction ", fraction, " is not in (0, 1]");
        const std::size_t total = properties(Device{device_}).total_memory;
        std::lock_guard lk(m_);
        reserved_limit_ = std::size_t(fraction * double(total));
    }

    std::vector<SegmentInfo> snapshot();

    // The largest free block in the cache (0 if none): how fragmented the cache is.
    std::size_t largest_free_block() {
        std::lock_guard lk(m_);
        return largest_free_unlocked();
    }

    int device() const { return device_; }

    // MemoryScope's hooks: `peak` follows allocated bytes from now until close_scope.
    std::int64_t open_scope(std::int64_t* peak) {
        std::lock_guard lk(m_);
        return scopes_.open(peak, stats_.allocated_bytes[0].current);
    }
    std::int64_t read_scope(const std::int64_t* peak) {
        std::lock_guard lk(m_);
        return *peak;
    }
    void close_scope(std::int64_t* peak) {
        std::lock_guard lk(m_);
        scopes_.close(peak);
    }

private:
    // An event recorded on a stream that used a freed block.
    struct Pending {
        rt::event_t event;
        int device;
        Block* block;
    };

    Block* take_free_block(BlockPool& pool, std::size_t size, rt::stream_t stream) {
        Block key(device_, stream, size, &pool, nullptr);
        auto it = pool.blocks.lower_bound(&key);
        if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
        const std::size_t found = (*it)->size;
        // Keep oversize blocks for oversize requests, and do not hand a huge block to a request
        // much smaller than it.
        if (size < config_.max_split_size && found >= config_.max_split_size) return nullptr;
        if (size >= config_.max_split_size && found >= size + kLargeBuffer) return nullptr;
        Block* b = *it;
        pool.blocks.erase(it);
        return b;
    }

    Block* new_segment(BlockPool& pool, std::size_t bytes, rt::stream_t stream) {
        if (reserved_ + bytes > reserved_limit_) return nullptr;
        void* p = nullptr;
        {
            DeviceGuard g(Device{device_});
            p = rt::try_malloc_device(bytes);
        }
        if (!p) return nullptr;
        reserved_ += bytes;
        auto* b = new Block(device_, stream, bytes, &pool, static_cast<char*>(p));
        b->segment = ++segments_made_;
        stat_increase(stats_.segment, pool.is_small, 1);
        stat_increase(stats_.reserved_bytes, pool.is_small, std::int64_t(bytes));
        ++stats_.num_device_alloc;
        return b;
    }

    bool should_split(const Block* b, std::size_t size) const {
        const std::size_t remaining = b->size - size;
        if (b->pool->is_small) return remaining >= kMinBlockSize;
        return size < config_.max_split_size && remaining > kSmallSize;
    }

    Block* hand_out(Block* block, BlockPool& pool, std::size_t size, std::size_t requested) {
        const bool small = pool.is_small;
        const bool already_split = block->is_split();
        if (should_split(block, size)) {
            Block* remaining = block;
            block = new Block(device_, remaining->stream, size, &pool, remaining->ptr);
            block->segment = remaining->segment;
            block->prev = remaining->prev;
            if (block->prev) block->prev->next = block;
            block->next = remaining;
            remaining->prev = block;
            remaining->ptr += size;
            remaining->size -= size;
            pool.blocks.insert(remaining);
            if (already_split) {
                stat_decrease(stats_.inactive_split_bytes, small, std::int64_t(size));
            } else {
                stat_increase(stats_.inactive_split_bytes, small, std::int64_t(remaining->size));
                stat_increase(stats_.inactive_split, small, 1);
            }
        } else if (already_split) {
            stat_decrease(stats_.inactive_split_bytes, small, std::int64_t(block->size));
            stat_decrease(stats_.inactive_split, small, 1);
        }
        block->allocated = true;
        block->requested = requested;
        block->stream_uses.clear();
        active_.insert(block);
        stat_increase(stats_.allocation, small, 1);
        stat_increase(stats_.allocated_bytes, small, std::int64_t(block->size));
        scopes_.update(stats_.allocated_bytes[0].current);
        stat_increase(stats_.requested_bytes, small, std::int64_t(requested));
        stat_increase(stats_.active, small, 1);
        stat_increase(stats_.active_bytes, small, std::int64_t(block->size));
        return block;
    }

    // Puts a block no stream uses any more back in its pool, merged with free neighbours.
    void free_block(Block* block) {
        BlockPool& pool = *block->pool;
        const bool small = pool.is_small;
        stat_decrease(stats_.requested_bytes, small, std::int64_t(block->requested));  // as PyTorch: at the real free
        block->requested = 0;
        const std::int64_t original = std::int64_t(block->size);
        std::int64_t split_blocks = 0, split_bytes = 0;
        for (Block* neighbour : {block->prev, block->next}) {
            const std::size_t merged = try_merge(block, neighbour, pool);
            if (merged) {
                --split_blocks;
                split_bytes -= std::int64_t(merged);
            }
        }
        block->stream_uses.clear();
        active_.erase(block);
        pool.blocks.insert(block);
        if (block->is_split()) {
            ++split_blocks;
            split_bytes += std::int64_t(block->size);
        }
        if (split_blocks > 0) stat_increase(stats_.inactive_split, small, split_blocks);
        if (split_blocks < 0) stat_decrease(stats_.inactive_split, small, -split_blocks);
        if (split_bytes > 0) stat_increase(stats_.inactive_split_bytes, small, split_bytes);
        if (split_bytes < 0) stat_decrease(stats_.inactive_split_bytes, small, -split_bytes);
        stat_decrease(stats_.active, small, 1);
        stat_decrease(stats_.active_bytes, small, original);
    }

    // Absorbs `src` into `dst` if it is a free neighbour; returns the bytes absorbed.
    static std::size_t try_merge(Block* dst, Block* src, BlockPool& pool) {
        if (!src || src->allocated || src->event_count > 0 || !src->stream_uses.empty()) return 0;
        if (dst->prev == src) {
            dst->ptr = src->ptr;
            dst->prev = src->prev;
            if (dst->prev) dst->prev->next = dst;
        } else {
            dst->next = src->next;
            if (dst->next) dst->next->prev = dst;
        }
        const std::size_t absorbed = src->size;
        dst->size += absorbed;
        pool.blocks.erase(src);
        delete src;
        return absorbed;
    }

    void insert_events(Block* block) {
        while (!block->stream_uses.empty()) {
            const StreamUse use = block->stream_uses.back();
            DeviceGuard g(Device{use.device});  // an event is recorded on its own device's stream
            auto& spare = event_pool_[use.device];
            rt::event_t e = spare.empty() ? rt::event_create(false) : spare.back();
            if (!spare.empty()) spare.pop_back();
            try {
                rt::event_record(e, use.stream);
            } catch (...) {
                spare.push_back(e);
                throw;
            }
            block->stream_uses.pop_back();
            ++block->event_count;
            pending_.push_back(Pending{e, use.device, block});
        }
    }

    // Returns blocks whose recorded streams have passed their free point.
    void process_events() {
        if (pending_.empty()) return;
        for (auto it = pending_.begin(); it != pending_.end();) {
            if (!rt::event_query(it->event)) {
                ++it;
                continue;
            }
            const Pending p = *it;
            it = pending_.erase(it);  // off the list before anything else can throw
            event_done(p);
        }
    }

    void synchronize_and_free_events() {
        while (!pending_.empty()) {
            const Pending p = pending_.front();
            rt::event_synchronize(p.event);
            pending_.pop_front();
            event_done(p);
        }
    }

    void event_done(const Pending& p) {
        event_pool_[p.device].push_back(p.event);
        if (--p.block->event_count == 0) free_block(p.block);
    }

    // Frees every cached segment that is whole (not split) and unused.
    void release_cached_blocks() {
        synchronize_and_free_events();
        for (BlockPool* pool : {&small_, &large_}) {
            for (auto it = pool->blocks.begin(); it != pool->blocks.end();) {
                Block* b = *it;
                if (b->is_split()) {
                    ++it;
                    continue;
                }
                it = pool->blocks.erase(it);
                {
                    DeviceGuard g(Device{device_});
                    rt::free_device(b->ptr);
                }
                reserved_ -= b->size;
                stat_decrease(stats_.segment, pool->is_small, 1);
                stat_decrease(stats_.reserved_bytes, pool->is_small, std::int64_t(b->size));
                ++stats_.num_device_free;
                delete b;
            }
        }
    }

    std::size_t largest_free_unlocked() const {
        std::size_t best = 0;
        for (const BlockPool* pool : {&small_, &large_})
            for (const Block* b : pool->blocks) best = std::max(best, b->size);
        return best;
    }

    std::string oom_message(std::size_t requested);

    std::mutex m_;
    int device_;
    AllocatorConfig config_;
    DeviceStats stats_;
    BlockPool small_{true}, large_{false};
    std::unordered_set<Block*> active_;                   // handed out, or waiting for other streams
    std::deque<Pending> pending_;                                     // frees waiting for other streams
    std::unordered_map<int, std::vector<rt::event_t>> event_pool_;  // spare events per device
    std::size_t reserved_ = 0;
    std::size_t reserved_limit_ = std::numeric_limits<std::size_t>::max();
    std::uint64_t segments_made_ = 0;
    ScopePeaks scopes_;  // open MemoryScopes
};

}  // namespace tessel::memory

#include "summary.hpp"
