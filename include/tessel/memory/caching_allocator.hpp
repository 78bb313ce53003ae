// The process's device allocators behind memory/allocator.hpp's functions: one caching allocator
// per device (or one stream-ordered pool per device under TESSEL_ALLOC_CONF=backend:async) and the
// map from pointers to their blocks. Most code wants memory/allocator.hpp; this header is for
// tests and tools that reach into one device's allocator (CachingAllocator::instance().device(d)).
#pragma once

#include <atomic>
#include <exception>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "../stream/stream.hpp"
#include "allocator.hpp"
#include "async_allocator.hpp"
#include "device_allocator.hpp"

namespace tessel::memory {

// The largest single request the allocators consider (1 PiB).
inline constexpr std::size_t kLargestRequest = std::size_t(1) << 50;

// The process's device allocators (one per device, of the backend TESSEL_ALLOC_CONF chose) and the
// map from pointers to their blocks.
class CachingAllocator {
public:
    // Never destroyed: tensors freed during static destruction still find it.
    static CachingAllocator& instance() {
        static CachingAllocator* a = new CachingAllocator();
        return *a;
    }

    void* allocate(std::size_t bytes, rt::stream_t stream) {
        if (bytes == 0) return nullptr;
        int dev = 0;
        TESSEL_CUDA_CHECK(rt::api::cudaGetDevice(&dev));
        check_stream(bytes, stream, dev);
        // No device has 2^50 bytes (1 PiB); beyond that the size arithmetic (rounding, statistics) would wrap.
        if (bytes > kLargestRequest) {
            // Counted without making the async backend's pool (which takes the device's context).
            if (backend_ == Backend::async) async_[std::size_t(dev)].refused.fetch_add(1, std::memory_order_relaxed);
            else device(dev).count_oom();
            fail<OutOfMemoryError>("out of memory on device ", dev, ": tried to allocate ", bytes,
                                   " bytes, more than any device holds (the limit is ", kLargestRequest,
                                   " bytes); check the size computation, or split the work into smaller tensors");
        }
        if (backend_ == Backend::async) {
            void* p = async(dev).allocate(bytes, stream);
            std::lock_guard lk(map_m_);
            async_devices_.emplace(p, dev);
            return p;
        }
        Block* b = device(dev).malloc(bytes, stream);
        std::lock_guard lk(map_m_);
        blocks_.emplace(b->ptr, b);
        return b->ptr;
    }

    // The memory is device `dev`'s and is reused by work on `stream`: a stream of another device (or
    // no stream at all) would let that reuse race. The current stream needs no driver call.
    static void check_stream(std::size_t bytes, rt::stream_t stream, int dev) {
        if (stream == nullptr || stream == current_stream_handle(Device{dev})) return;
        const int owner = rt::stream_device(stream);  // a handle that is no live stream: CudaError
        require(owner == dev, "memory::allocate(", bytes, " bytes): stream ", static_cast<const void*>(stream), " belongs to device ",
                owner, ", but the memory is allocated on the current device ", dev, "; make device ", owner,
                " current first (DeviceGuard) or pass a stream of device ", dev);
    }

    void deallocate(void* p) {
        if (!p) return;
        if (backend_ == Backend::async) {
            async(async_device_of(p, "deallocate", true)).deallocate(p);
            return;
        }
        Block* b = take(p);
        device(b->device).free(b);
    }

    void record_stream(void* p, rt::stream_t stream, int stream_device) {
        if (!p) return;  // allocate(0)'s null: nothing to keep (torch's recordStream)
        if (backend_ == Backend::async) {
            async(async_device_of(p, "record_stream", false)).record_stream(p, stream, stream_device);
            return;
        }
        int d = 0;
        {
            std::lock_guard lk(map_m_);
            auto it = blocks_.find(p);
            require(it != blocks_.end(), "record_stream: pointer ", p,
                    " is not the start of a live allocation of tessel's caching allocator");
            d = it->second->device;
        }
        // Looked up again under the device's lock (taken before map_m_ only here; nothing takes them
        // the other way round), so a free on another thread cannot delete the block under us.
        device(d).record_stream_if_live(
            [&]() -> Block* {
                std::lock_guard lk(map_m_);
                auto it = blocks_.find(p);
                return it == blocks_.end() ? nullptr : it->second;
            },
            p, stream, stream_device);
    }

    // True if `p` is the start of a live allocation of this allocator.
    bool owns(const void* p) {
        std::lock_guard lk(map_m_);
        return blocks_.count(const_cast<void*>(p)) != 0 || async_devices_.count(const_cast<void*>(p)) != 0;
    }

    // The native allocator of device d (Unsupported under the async backend).
    DeviceCachingAllocator& device(int d) {
        check_device(d);
        if (backend_ != Backend::native)
            fail<Unsupported>("this operation needs the native caching allocator; TESSEL_ALLOC_CONF selects backend:async");
        return *devices_[std::size_t(d)];
    }
    // The async backend's allocator of device d, made on first use: making one takes the device's
    // pool and so its context (hundreds of MiB on a GPU), which a device the program never
    // allocates on should not pay.
    AsyncDeviceAllocator& async(int d) {
        check_device(d);
        AsyncSlot& slot = async_[std::size_t(d)];
        if (AsyncDeviceAllocator* a = slot.made.load(std::memory_order_acquire)) return *a;
        std::lock_guard lk(slot.m);
        if (!slot.owner) {  // a constructor that throws leaves it unmade, to be tried again
            slot.owner = std::make_unique<AsyncDeviceAllocator>(d);
            slot.made.store(slot.owner.get(), std::memory_order_release);
        }
        return *slot.owner;
    }
    // The same if already made, else nullptr (nothing was allocated there: its statistics are zero).
    AsyncDeviceAllocator* async_if_made(int d) {
        check_device(d);
        return async_[std::size_t(d)].made.load(std::memory_order_acquire);
    }
    // The async backend's OutOfMemoryErrors on device d for sizes no device holds, refused before its pool.
    std::int64_t async_refused(int d) {
        check_device(d);
        return async_[std::size_t(d)].refused.load(std::memory_order_relaxed);
    }
    int device_count() const { return count_; }
    Backend backend() const { return backend_; }

private:
    CachingAllocator() : backend_(AllocatorConfig::from_env().backend), count_(tessel::device_count()) {
        if (backend_ == Backend::async) async_ = std::make_unique<AsyncSlot[]>(std::size_t(count_));
        else
            for (int d = 0; d < count_; ++d) devices_.push_back(std::make_unique<DeviceCachingAllocator>(d));
    }
    void check_device(int d) const {
        require(d >= 0 && d < count_, "device ", d, " does not exist: ", count_, " device(s) are visible");
    }
    int async_device_of(void* p, const char* what, bool forget) {
        std::lock_guard lk(map_m_);
        auto it = async_devices_.find(p);
        require(it != async_devices_.end(), what, ": pointer ", p,
                " is not the start of a live allocation of tessel's allocator (freed twice, or allocated elsewhere?)");
        const int d = it->second;
        if (forget) async_devices_.erase(it);
        return d;
    }
    Block* take(void* p) {
        std::lock_guard lk(map_m_);
        auto it = blocks_.find(p);
        require(it != blocks_.end(), "deallocate: pointer ", p,
                " is not the start of a live allocation of tessel's caching allocator (freed twice, or allocated elsewhere?)");
        Block* b = it->second;
        blocks_.erase(it);
        return b;
    }

    Backend backend_;
    int count_;
    std::vector<std::unique_ptr<DeviceCachingAllocator>> devices_;
    // One device's async allocator, made on its first allocation (async()).
    struct AsyncSlot {
        std::mutex m;
        std::unique_ptr<AsyncDeviceAllocator> owner;
        std::atomic<AsyncDeviceAllocator*> made{nullptr};
        std::atomic<std::int64_t> refused{0};  // OutOfMemoryErrors for sizes no device holds (in num_ooms)
    };
    std::unique_ptr<AsyncSlot[]> async_;
    std::mutex map_m_;
    std::unordered_map<void*, Block*> blocks_;
    std::unordered_map<void*, int> async_devices_;
};

// The definitions of memory/allocator.hpp's functions, compiled once per program where the runtime
// is compiled separately (core/linkage.hpp).
#if TESSEL_DEFINE_RUNTIME
TESSEL_API Backend backend() { return CachingAllocator::instance().backend(); }

TESSEL_API void* allocate(std::size_t bytes, rt::stream_t stream) {
    return CachingAllocator::instance().allocate(bytes, stream);
}
TESSEL_API void deallocate(void* p) { CachingAllocator::instance().deallocate(p); }
TESSEL_API void record_stream(void* p, rt::stream_t stream, std::optional<Device> stream_device) {
    const int d = tessel::detail::checked_stream_device("record_stream", stream, stream_device);
    CachingAllocator::instance().record_stream(p, stream, d);
}
TESSEL_API bool owns(const void* p) { return CachingAllocator::instance().owns(p); }

TESSEL_API void empty_cache() {
    auto& a = CachingAllocator::instance();
    std::exception_ptr first;  // a device's error (a kernel fault surfacing) leaves the others' caches to empty
    for (int d = 0; d < a.device_count(); ++d) {
        try {
            if (a.backend() == Backend::native) a.device(d).empty_cache();
            else if (AsyncDeviceAllocator* made = a.async_if_made(d)) made->empty_cache();
        } catch (...) {
            if (!first) first = std::current_exception();
        }
    }
    if (first) std::rethrow_exception(first);
}

TESSEL_API DeviceStats stats(Device d) {
    auto& a = CachingAllocator::instance();
    if (a.backend() == Backend::native) return a.device(d.index).stats();
    AsyncDeviceAllocator* made = a.async_if_made(d.index);
    DeviceStats s = made ? made->stats() : DeviceStats{};
    s.num_ooms += a.async_refused(d.index);
    return s;
}
TESSEL_API std::int64_t allocated(Device d) { return stats(d).allocated_bytes[StatPool::all].current; }
TESSEL_API std::int64_t max_allocated(Device d) { return stats(d).allocated_bytes[StatPool::all].peak; }
TESSEL_API std::int64_t reserved(Device d) { return stats(d).reserved_bytes[StatPool::all].current; }
TESSEL_API std::int64_t max_reserved(Device d) { return stats(d).reserved_bytes[StatPool::all].peak; }
TESSEL_API void reset_peak_stats(Device d) {
    auto& a = CachingAllocator::instance();
    if (a.backend() == Backend::native) a.device(d.index).reset_peak_stats();
    else if (AsyncDeviceAllocator* made = a.async_if_made(d.index)) made->reset_peak_stats();
}
TESSEL_API void set_memory_fraction(double fraction, Device d) {
    CachingAllocator::instance().device(d.index).set_memory_fraction(fraction);
}
TESSEL_API std::vector<std::string> check_invariants(Device d) {
    auto& a = CachingAllocator::instance();
    if (a.backend() == Backend::native) return a.device(d.index).check_invariants();
    AsyncDeviceAllocator* made = a.async_if_made(d.index);
    return made ? made->check_invariants() : std::vector<std::string>{};
}
TESSEL_API std::string memory_summary(Device d) {
    // The driver's pool reports only its current and peak reservation (as in PyTorch's async backend).
    return memory_summary(d.index, stats(d),
                          backend() == Backend::async ? "backend async: reserved memory is the pool's current and peak only" : "");
}
TESSEL_API std::vector<SegmentInfo> snapshot() {
    std::vector<SegmentInfo> all;
    auto& a = CachingAllocator::instance();
    if (a.backend() == Backend::async) return all;
    for (int d = 0; d < a.device_count(); ++d) {
        auto s = a.device(d).snapshot();
        all.insert(all.end(), s.begin(), s.end());
    }
    return all;
}

TESSEL_API MemoryScope::MemoryScope(Device d) : device_(d.index), async_(CachingAllocator::instance().backend() == Backend::async) {
    auto& a = CachingAllocator::instance();
    start_ = async_ ? a.async(device_).open_scope(&peak_) : a.device(device_).open_scope(&peak_);
}
TESSEL_API MemoryScope::~MemoryScope() {
    auto& a = CachingAllocator::instance();
    if (async_) a.async(device_).close_scope(&peak_);
    else a.device(device_).close_scope(&peak_);
}
TESSEL_API std::int64_t MemoryScope::peak_bytes() const {
    auto& a = CachingAllocator::instance();
    return async_ ? a.async(device_).read_scope(&peak_) : a.device(device_).read_scope(&peak_);
}
#endif  // TESSEL_DEFINE_RUNTIME

}  // namespace tessel::memory
