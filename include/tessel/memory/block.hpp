// A block of device memory as the caching allocator tracks it: a whole cudaMalloc'd segment or a
// piece of one, linked to its neighbours in the segment so frees can coalesce them. Also the
// fallback wait every cache uses when a free cannot be ordered after a stream by an event.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <set>
#include <vector>

#include "../runtime/device.hpp"
#include "../runtime/rt.hpp"

namespace tessel::detail {
// Waits for all work of `device` when no event can mark a stream's point in a free (the stream was
// destroyed, or its device fails or does not exist), so the freed memory can be reused or returned safely. The
// caller rethrows the error that made it wait; a failure of the wait itself (in the sim, an earlier
// kernel's fault found by the synchronisation; on a GPU, a broken context) would be lost behind
// that error, so it is reported here.
inline void synchronize_for_free(int device) noexcept {
    try {
        if (device < 0 || device >= device_count()) return;  // no such device: nothing of it can be running
        DeviceGuard g(Device{device});
        rt::device_synchronize();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tessel: synchronising device %d to release freed memory failed: %s\n", device, e.what());
    } catch (...) {
        std::fprintf(stderr, "tessel: synchronising device %d to release freed memory failed\n", device);
    }
}
}  // namespace tessel::detail

namespace tessel::memory {

struct BlockPool;

// A stream other than the allocating one that uses a block, and the device that stream belongs to
// (events must be created and recorded on the stream's own device).
struct StreamUse {
    rt::stream_t stream = nullptr;
    int device = 0;
    friend bool operator==(const StreamUse&, const StreamUse&) = default;
};

// One block: its place, size, owning stream and pool, and its neighbours within the segment.
struct Block {
    int device = 0;
    rt::stream_t stream = nullptr;  // the stream it was allocated on; reused at once only there
    std::size_t size = 0;           // bytes, a multiple of 512
    std::size_t requested = 0;      // what the caller asked for (0 while free)
    BlockPool* pool = nullptr;
    char* ptr = nullptr;
    bool allocated = false;
    int event_count = 0;                     // streams that used it and have not yet passed its free
    std::vector<StreamUse> stream_uses;      // record_stream(): other streams using it
    Block* prev = nullptr;                   // neighbours in the same segment
    Block* next = nullptr;
    std::uint64_t segment = 0;               // id of the cudaMalloc it came from

    Block(int dev, rt::stream_t s, std::size_t bytes, BlockPool* p, char* at)
        : device(dev), stream(s), size(bytes), pool(p), ptr(at) {}
    bool is_split() const { return prev != nullptr || next != nullptr; }
};

// Best fit within a stream: blocks ordered by (stream, size, address).
struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const {
        if (a->stream != b->stream)
            return reinterpret_cast<std::uintptr_t>(a->stream) < reinterpret_cast<std::uintptr_t>(b->stream);
        if (a->size != b->size) return a->size < b->size;
        return reinterpret_cast<std::uintptr_t>(a->ptr) < reinterpret_cast<std::uintptr_t>(b->ptr);
    }
};

// The free blocks of one size class: small (requests <= 1 MiB, 2 MiB segments) or large.
struct BlockPool {
    explicit BlockPool(bool small_pool) : is_small(small_pool) {}
    std::set<Block*, BlockOrder> blocks;
    const bool is_small;
};

}  // namespace tessel::memory
