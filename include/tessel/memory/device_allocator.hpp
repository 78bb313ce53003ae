// The caching allocator of one device, after PyTorch's CUDACachingAllocator: requests are rounded to
// 512 bytes; requests up to 1 MiB come from 2 MiB segments (small pool), larger ones from 20 MiB
// segments (1-10 MiB) or their own segment rounded to 2 MiB; a free block is reused by best fit
// within its stream, split when much larger than needed, and coalesced with free neighbours when
// freed. A block used on other streams (record_stream) returns to the pool only after those
// streams pass the point where it was freed. When cudaMalloc fails, the cache is released and the
// allocation retried before OutOfMemoryError. Under AddressSanitizer in the sim, what no caller owns
// (free blocks, the slack past a request) is poisoned (asan.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../runtime/device.hpp"
#include "asan.hpp"
#include "block.hpp"
#include "config.hpp"
#include "snapshot.hpp"
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

    // Counts an OutOfMemoryError thrown before the request reached this device's memory (a size no
    // device holds: CachingAllocator's kLargestRequest).
    void count_oom() {
        std::lock_guard lk(m_);
        ++stats_.num_ooms;
    }
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
                // Waiting for other streams' events returned their blocks; one of them may fit (a
                // segment still partly in use stays cached, so only the pool has it).
                block = take_free_block(pool, size, stream);
                if (!block) block = new_segment(pool, seg, stream);
            }
            if (!block) {
                ++stats_.num_ooms;
                throw OutOfMemoryError(oom_message(bytes, seg));
            }
        }
        return hand_out(block, pool, size, bytes);
    }

    // Returns a block. If other streams used it, it waits in the pool's limbo until they pass here.
    // A stream whose point cannot be marked with an event (destroyed, or its device failing) is
    // waited for by synchronising its device instead, so the block is never lost: the allocator is
    // consistent and the block reusable when the first such error is rethrown.
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
        const std::exception_ptr error = insert_events(block);
        if (block->event_count == 0) free_block(block);
        if (error) std::rethrow_exception(error);
    }

    // Marks `block` as used by `stream` (of `stream_device`) too, so a free waits for work queued there.
    void record_stream(Block* block, rt::stream_t stream, int stream_device) {
        std::lock_guard lk(m_);
        note_stream_use(block, stream, stream_device);
    }
    // The same for the block `find_live()` returns, called under this allocator's lock: a free racing
    // this call has either taken the block from the caller's map first (nullptr: `p` is no longer
    // live) or waits for the lock until the use is noted. The block of a pointer looked up before
    // taking the lock could have been freed, merged and deleted meanwhile.
    template <class FindLive>
    void record_stream_if_live(FindLive&& find_live, const void* p, rt::stream_t stream, int stream_device) {
        std::lock_guard lk(m_);
        Block* block = find_live();
        require(block != nullptr, "record_stream: pointer ", p,
                " was freed while record_stream ran (on another thread); record the stream before freeing");
        note_stream_use(block, stream, stream_device);
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

    // Every broken invariant of the cache, in words (empty when consistent): the blocks of each
    // segment linked both ways at contiguous addresses, each block tracked exactly once (free in its
    // pool, handed out, or waiting for events it has), free neighbours coalesced, and every
    // statistic equal to what the blocks add up to. Under AddressSanitizer with no shadow change
    // pending, also the poisoning of free blocks and of handed-out blocks' slack. For tests and fuzzers.
    std::vector<std::string> check_invariants();

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
    // record_stream's bookkeeping, under m_: the stream joins the block's uses once.
    void note_stream_use(Block* block, rt::stream_t stream, int stream_device) {
        require(block->allocated, "record_stream: the block at ", static_cast<void*>(block->ptr), " is not in use");
        if (stream == block->stream && stream_device == device_) return;
        const StreamUse use{stream, stream_device};
        for (const StreamUse& u : block->stream_uses)
            if (u == use) return;
        block->stream_uses.push_back(use);
    }

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
        asan::poison(p, bytes);  // nothing queued can use a fresh segment yet
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
        // The caller may use its bytes at once (unpoisoned now); the slack is poisoned once the
        // previous owners' work queued on the stream has run, and that queued change also undoes
        // their free's pending poisoning of these bytes.
        asan::unpoison(block->ptr, requested);
        shadow_.set_owned_after(block->stream, device_, block->ptr, block->size, requested);
        return block;
    }

    // Puts a block no stream uses any more back in its pool, merged with free neighbours.
    void free_block(Block* block) {
        BlockPool& pool = *block->pool;
        const bool small = pool.is_small;
        stat_decrease(stats_.requested_bytes, small, std::int64_t(block->requested));  // as PyTorch: at the real free
        block->requested = 0;
        shadow_.poison_after(block->stream, device_, block->ptr, block->size);  // before merging moves ptr
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

    // Marks the free point on every stream in block->stream_uses (emptying it). A stream that cannot
    // be marked is waited for through its device; the first such error is returned.
    std::exception_ptr insert_events(Block* block) {
        std::exception_ptr first;
        while (!block->stream_uses.empty()) {
            const StreamUse use = block->stream_uses.back();
            try {
                record_free_event(block, use);
            } catch (...) {
                if (!first) first = std::current_exception();
                detail::synchronize_for_free(use.device);
            }
            block->stream_uses.pop_back();
        }
        return first;
    }

    void record_free_event(Block* block, const StreamUse& use) {
        DeviceGuard g(Device{use.device});  // an event is recorded on its own device's stream
        auto& spare = event_pool_[use.device];
        rt::event_t e = spare.empty() ? rt::event_create(false) : spare.back();
        if (!spare.empty()) spare.pop_back();
        try {
            pending_.push_back(Pending{e, use.device, block});
            try {
                rt::event_record(e, use.stream);
            } catch (...) {
                pending_.pop_back();
                throw;
            }
        } catch (...) {
            spare.push_back(e);
            throw;
        }
        ++block->event_count;
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
        if (--p.block->event_count == 0) free_block(p.block);  // first: the block must not depend on the spare list
        event_pool_[p.device].push_back(p.event);
    }

    // Frees every cached segment that is whole (not split) and unused. Each leaves the books before
    // cudaFree: when cudaFree reports an error (in the sim, an earlier kernel's fault found by its
    // device synchronisation, after the memory is freed; on a GPU, a broken context), the memory is
    // gone or unusable either way. The first error is rethrown once every segment is handled.
    void release_cached_blocks() {
        synchronize_and_free_events();
        std::vector<Block*> whole;
        for (BlockPool* pool : {&small_, &large_})
            for (Block* b : pool->blocks)
                if (!b->is_split()) whole.push_back(b);
        if (whole.empty()) return;
        shadow_.drain();  // no queued poisoning may land on memory the runtime has taken back
        std::exception_ptr first;
        for (Block* b : whole) {
            BlockPool& pool = *b->pool;
            pool.blocks.erase(b);
            reserved_ -= b->size;
            stat_decrease(stats_.segment, pool.is_small, 1);
            stat_decrease(stats_.reserved_bytes, pool.is_small, std::int64_t(b->size));
            ++stats_.num_device_free;
            asan::unpoison(b->ptr, b->size);  // the runtime may write or free it
            try {
                DeviceGuard g(Device{device_});
                rt::free_device(b->ptr);
            } catch (...) {
                if (!first) first = std::current_exception();
            }
            delete b;
        }
        if (first) std::rethrow_exception(first);
    }

    std::size_t largest_free_unlocked() const {
        std::size_t best = 0;
        for (const BlockPool* pool : {&small_, &large_})
            for (const Block* b : pool->blocks) best = std::max(best, b->size);
        return best;
    }

    // `segment`: what the failed cudaMalloc asked for, where it differs from the request.
    std::string oom_message(std::size_t requested, std::size_t segment = 0);

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
    asan::ShadowQueue shadow_;  // stream-ordered poisoning (a no-op unless the sim runs under ASan)
};

inline std::vector<std::string> DeviceCachingAllocator::check_invariants() {
    std::lock_guard lk(m_);
    std::vector<std::string> bad;
    auto report = [&](const auto&... parts) { bad.push_back(detail::concat("device ", device_, ": ", parts...)); };
    auto at = [](const Block* b) { return static_cast<const void*>(b->ptr); };
    auto pool_name = [](const BlockPool* p) { return p == nullptr ? "no" : p->is_small ? "small" : "large"; };

    // Where each block is tracked: free in a pool's set, or active_ (handed out or waiting for events).
    std::unordered_map<const Block*, const BlockPool*> pooled;
    for (const BlockPool* pool : {&small_, &large_}) {
        if (!std::is_sorted(pool->blocks.begin(), pool->blocks.end(), BlockOrder{}))
            report("the ", pool_name(pool), " pool's free set is out of order (a block's key changed while in it)");
        for (Block* b : pool->blocks) {
            if (!pooled.emplace(b, pool).second) report("free block at ", at(b), " is in both pools");
            if (pool->blocks.find(b) == pool->blocks.end())
                report("free block at ", at(b), " cannot be found in its pool's set (its key changed while in it)");
            if (b->pool != pool)
                report("free block at ", at(b), " is in the ", pool_name(pool), " pool's set but belongs to the ",
                       pool_name(b->pool), " pool");
            if (b->allocated) report("block at ", at(b), " is allocated but in the free pool");
            if (b->event_count != 0) report("free block at ", at(b), " still waits for ", b->event_count, " event(s)");
            if (!b->stream_uses.empty()) report("free block at ", at(b), " still lists ", b->stream_uses.size(), " stream use(s)");
            if (b->requested != 0) report("free block at ", at(b), " still counts ", b->requested, " requested bytes");
            if (active_.count(b)) report("block at ", at(b), " is both free in the pool and active");
        }
    }
    std::unordered_map<const Block*, int> events;  // pending events per block
    for (const Pending& p : pending_) {
        ++events[p.block];
        if (!active_.count(p.block)) report("an event waits on block at ", at(p.block), ", which is not active");
    }
    for (Block* b : active_) {
        if (!b->allocated && b->event_count == 0)
            report("block at ", at(b), " is neither handed out, nor free in a pool, nor waiting for events: it is lost");
        if (b->allocated && b->event_count != 0)
            report("block at ", at(b), " is handed out while still waiting for ", b->event_count, " event(s) of its last free");
        if (!b->allocated && !b->stream_uses.empty())
            report("freed block at ", at(b), " still lists ", b->stream_uses.size(), " stream use(s) no event stands for");
        if (events[b] != b->event_count)
            report("block at ", at(b), " counts ", b->event_count, " pending event(s) but ", events[b], " are queued for it");
        if (b->requested > b->size) report("block at ", at(b), " of ", b->size, " bytes was requested with ", b->requested);
    }

    // Every segment from its first block: linked both ways, contiguous, one stream, pool and id.
    std::vector<const Block*> tracked;
    for (const auto& [b, pool] : pooled) tracked.push_back(b);
    for (const Block* b : active_) tracked.push_back(b);
    std::unordered_set<const Block*> heads, seen;
    for (const Block* b : tracked) {
        std::unordered_set<const Block*> walked{b};
        const Block* h = b;
        while (h->prev && walked.insert(h->prev).second) h = h->prev;
        if (h->prev) {
            report("the prev links from block at ", at(b), " run in a cycle");
            continue;
        }
        heads.insert(h);
    }
    struct Sums {
        std::int64_t allocation = 0, allocated_bytes = 0, requested_bytes = 0, active = 0, active_bytes = 0, segment = 0,
                     reserved_bytes = 0, inactive_split = 0, inactive_split_bytes = 0;
    };
    Sums sums[3];
    auto add = [&](bool small, auto member, std::int64_t n) {
        sums[0].*member += n;
        sums[small ? 1 : 2].*member += n;
    };
    const bool shadow_settled = asan::enabled && shadow_.idle();
    for (const Block* head : heads) {
        const bool small = head->pool && head->pool->is_small;
        std::size_t total = 0;
        for (const Block* x = head; x; x = x->next) {
            if (!seen.insert(x).second) {
                report("segment ", head->segment, " links back to block at ", at(x), " (a cycle)");
                break;
            }
            const bool is_pooled = pooled.count(x) != 0, is_active = active_.count(const_cast<Block*>(x)) != 0;
            if (!is_pooled && !is_active)
                report("block at ", at(x), " of segment ", head->segment, " is linked in but neither free in a pool nor active: it is lost");
            if (x->size == 0 || x->size % kMinBlockSize != 0)
                report("block at ", at(x), " has ", x->size, " bytes, not a positive multiple of ", kMinBlockSize);
            if (x->segment != head->segment)
                report("block at ", at(x), " says segment ", x->segment, " but is linked into segment ", head->segment);
            if (x->pool != head->pool) report("block at ", at(x), " belongs to another pool than the rest of its segment");
            if (x->stream != head->stream) report("block at ", at(x), " belongs to another stream than the rest of its segment");
            if (x->device != device_) report("block at ", at(x), " says device ", x->device);
            if (x->next) {
                if (x->next->prev != x) report("block at ", at(x), ": the next block's prev link does not point back to it");
                if (x->ptr + x->size != x->next->ptr)
                    report("block at ", at(x), " (", x->size, " bytes) is not followed contiguously by the next block at ", at(x->next));
                if (is_pooled && pooled.count(x->next))
                    report("free blocks at ", at(x), " and ", at(x->next), " are neighbours in segment ", head->segment,
                           " but were not coalesced");
            }
            total += x->size;
            if (x->allocated) {
                add(small, &Sums::allocation, 1);
                add(small, &Sums::allocated_bytes, std::int64_t(x->size));
            }
            if (is_active) {
                add(small, &Sums::active, 1);
                add(small, &Sums::active_bytes, std::int64_t(x->size));
                add(small, &Sums::requested_bytes, std::int64_t(x->requested));
            }
            if (is_pooled && x->is_split()) {
                add(small, &Sums::inactive_split, 1);
                add(small, &Sums::inactive_split_bytes, std::int64_t(x->size));
            }
            if (shadow_settled) {  // sampled: the first byte of free blocks, the edges of handed-out ones
                if (is_pooled && !asan::is_poisoned(x->ptr)) report("free block at ", at(x), " is not poisoned");
                if (x->allocated && x->requested > 0 && x->requested <= x->size) {
                    if (asan::is_poisoned(x->ptr) || asan::is_poisoned(x->ptr + x->requested - 1))
                        report("handed-out block at ", at(x), " has poisoned bytes within its ", x->requested, " requested");
                    if (x->requested < x->size && !asan::is_poisoned(x->ptr + x->requested))
                        report("handed-out block at ", at(x), " has unpoisoned slack past its ", x->requested, " requested bytes");
                }
            }
        }
        add(small, &Sums::segment, 1);
        add(small, &Sums::reserved_bytes, std::int64_t(total));
        if (small && total != kSmallBuffer)
            report("small-pool segment ", head->segment, " at ", at(head), " has ", total, " bytes instead of ", kSmallBuffer);
        if (!small && total % kRoundLarge != 0)
            report("large-pool segment ", head->segment, " at ", at(head), " has ", total, " bytes, not a multiple of ", kRoundLarge);
    }
    for (const Block* b : tracked)
        if (!seen.count(b)) report("block at ", at(b), " cannot be reached from the first block of its segment");

    const char* pools[] = {"all", "small", "large"};
    auto compare = [&](const char* name, const StatArray& stat, auto member) {
        for (int i = 0; i < 3; ++i) {
            const Stat& st = stat[std::size_t(i)];
            const std::int64_t expected = sums[i].*member;
            if (st.current != expected)
                report("stats.", name, "[", pools[i], "].current is ", st.current, " but the blocks add up to ", expected);
            if (st.peak < st.current) report("stats.", name, "[", pools[i], "].peak ", st.peak, " is below current ", st.current);
            if (st.allocated - st.freed != st.current)
                report("stats.", name, "[", pools[i], "]: allocated ", st.allocated, " - freed ", st.freed, " != current ", st.current);
        }
    };
    compare("allocation", stats_.allocation, &Sums::allocation);
    compare("allocated_bytes", stats_.allocated_bytes, &Sums::allocated_bytes);
    compare("requested_bytes", stats_.requested_bytes, &Sums::requested_bytes);
    compare("active", stats_.active, &Sums::active);
    compare("active_bytes", stats_.active_bytes, &Sums::active_bytes);
    compare("segment", stats_.segment, &Sums::segment);
    compare("reserved_bytes", stats_.reserved_bytes, &Sums::reserved_bytes);
    compare("inactive_split", stats_.inactive_split, &Sums::inactive_split);
    compare("inactive_split_bytes", stats_.inactive_split_bytes, &Sums::inactive_split_bytes);
    if (std::int64_t(reserved_) != stats_.reserved_bytes[0].current)
        report("the reservation count ", reserved_, " differs from stats.reserved_bytes ", stats_.reserved_bytes[0].current);
    return bad;
}

}  // namespace tessel::memory

#include "summary.hpp"
