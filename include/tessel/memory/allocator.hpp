// The public face of device memory: allocate/deallocate through the per-device caching allocators,
// record_stream, empty_cache, statistics, memory_summary, snapshot, set_memory_fraction and
// MemoryScope. Everything in tessel that needs device memory comes through here.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

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
        // No device has 2^50 bytes (1 PiB); beyond that the size arithmetic (rounding, statistics) would wrap.
        if (bytes > kLargestRequest)
            fail<OutOfMemoryError>("out of memory on device ", dev, ": tried to allocate ", bytes,
                                   " bytes, more than any device holds (the limit is ", kLargestRequest,
                                   " bytes); check the size computation, or split the work into smaller tensors");
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
        if (backend_ == Backend::async) {
            async(async_device_of(p, "record_stream", false)).record_stream(p, stream, stream_device);
            return;
        }
        Block* b = nullptr;
        {
            std::lock_guard lk(map_m_);
            auto it = blocks_.find(p);
            require(it != blocks_.end(), "record_stream: pointer ", p,
                    " is not the start of a live allocation of tessel's caching allocator");
            b = it->second;
        }
        device(b->device).record_stream(b, stream, stream_device);
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
    AsyncDeviceAllocator& async(int d) {
        check_device(d);
        return *async_[std::size_t(d)];
    }
    int device_count() const { return count_; }
    Backend backend() const { return backend_; }

private:
    CachingAllocator() : backend_(AllocatorConfig::from_env().backend), count_(tessel::device_count()) {
        for (int d = 0; d < count_; ++d) {
            if (backend_ == Backend::async) async_.push_back(std::make_unique<AsyncDeviceAllocator>(d));
            else devices_.push_back(std::make_unique<DeviceCachingAllocator>(d));
        }
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
    std::vector<std::unique_ptr<AsyncDeviceAllocator>> async_;
    std::mutex map_m_;
    std::unordered_map<void*, Block*> blocks_;
    std::unordered_map<void*, int> async_devices_;
};

// The backend serving device memory in this process (TESSEL_ALLOC_CONF=backend:...).
inline Backend backend() { return CachingAllocator::instance().backend(); }

// `bytes` of device memory on the current device, for use on `stream` (nullptr: the default stream).
inline void* allocate(std::size_t bytes, rt::stream_t stream = nullptr) {
    return CachingAllocator::instance().allocate(bytes, stream);
}
// Returns memory from allocate(); it is reused at once by work on its stream.
inline void deallocate(void* p) { CachingAllocator::instance().deallocate(p); }
// Declares that work on `stream` (a stream of `stream_device`, by default the current device) uses
// `p`: after deallocate(p), the memory is not reused until the work queued on `stream` at that
// moment has completed.
// The stream and its device are checked here, not when the memory is freed.
inline void record_stream(void* p, rt::stream_t stream, std::optional<Device> stream_device = std::nullopt) {
    const Device d = stream_device ? *stream_device : current_device();
    require(d.index >= 0 && d.index < device_count(), "record_stream: device ", d.index, " does not exist (", device_count(),
            " device(s) visible)");
    int actual = 0;
    {
        DeviceGuard g(d);  // the default stream handle means this device's default stream
        actual = rt::stream_device(stream);
    }
    require(actual == d.index, "record_stream: stream ", static_cast<const void*>(stream), " belongs to device ", actual,
            ", not to device ", d.index, " as stated");
    CachingAllocator::instance().record_stream(p, stream, d.index);
}
// True if `p` is the start of a live allocation of tessel's device allocator.
inline bool owns(const void* p) { return CachingAllocator::instance().owns(p); }

// Returns all cached, unused memory of every device to the runtime.
inline void empty_cache() {
    auto& a = CachingAllocator::instance();
    for (int d = 0; d < a.device_count(); ++d) {
        if (a.backend() == Backend::async) a.async(d).empty_cache();
        else a.device(d).empty_cache();
    }
}

inline DeviceStats stats(Device d = current_device()) {
    auto& a = CachingAllocator::instance();
    return a.backend() == Backend::async ? a.async(d.index).stats() : a.device(d.index).stats();
}
// PyTorch's names (torch.cuda.memory_allocated & co.), in bytes, for device d.
inline std::int64_t allocated(Device d = current_device()) { return stats(d).allocated_bytes[StatPool::all].current; }
inline std::int64_t max_allocated(Device d = current_device()) { return stats(d).allocated_bytes[StatPool::all].peak; }
inline std::int64_t reserved(Device d = current_device()) { return stats(d).reserved_bytes[StatPool::all].current; }
inline std::int64_t max_reserved(Device d = current_device()) { return stats(d).reserved_bytes[StatPool::all].peak; }
// Starts the peaks (max_allocated, max_reserved, every Stat's peak) again from the current values.
inline void reset_peak_stats(Device d = current_device()) {
    auto& a = CachingAllocator::instance();
    if (a.backend() == Backend::async) a.async(d.index).reset_peak_stats();
    else a.device(d.index).reset_peak_stats();
}
// Caps what tessel reserves on `d` at `fraction` of its memory; allocations beyond raise
// OutOfMemoryError. Native backend only (Unsupported under backend:async).
inline void set_memory_fraction(double fraction, Device d = current_device()) {
    CachingAllocator::instance().device(d.index).set_memory_fraction(fraction);
}
// What is wrong with the bookkeeping of device `d`'s allocator (block chains, pools, statistics), one
// sentence per violation; empty when consistent (under backend:async: the live allocations and the
// statistics). For tests and fuzzers: it walks every block under the allocator's lock.
inline std::vector<std::string> check_invariants(Device d = current_device()) {
    auto& a = CachingAllocator::instance();
    if (a.backend() == Backend::async) return a.async(d.index).check_invariants();
    return a.device(d.index).check_invariants();
}
// A text table of the statistics of device `d`.
inline std::string memory_summary(Device d = current_device()) { return memory_summary(d.index, stats(d)); }
// Every segment of every device with its blocks, in address order (empty under backend:async, whose
// pool does not expose its segments).
inline std::vector<SegmentInfo> snapshot() {
    std::vector<SegmentInfo> all;
    auto& a = CachingAllocator::instance();
    if (a.backend() == Backend::async) return all;
    for (int d = 0; d < a.device_count(); ++d) {
        auto s = a.device(d).snapshot();
        all.insert(all.end(), s.begin(), s.end());
    }
    return all;
}

// Reports the peak of allocated device memory while it is alive (nested scopes each see their own):
//   tessel::memory::MemoryScope scope;  ...work...;  scope.peak_increase_bytes()
class MemoryScope {
public:
    explicit MemoryScope(Device d = current_device()) : allocator_(pick(d)) {
        start_ = std::visit([&](auto* a) { return a->open_scope(&peak_); }, allocator_);
    }
    ~MemoryScope() {
        std::visit([&](auto* a) { a->close_scope(&peak_); }, allocator_);
    }
    MemoryScope(const MemoryScope&) = delete;
    MemoryScope& operator=(const MemoryScope&) = delete;

    std::int64_t start_bytes() const { return start_; }  // allocated when the scope opened
    std::int64_t peak_bytes() const {                     // highest allocated since
        return std::visit([&](auto* a) { return a->read_scope(&peak_); }, allocator_);
    }
    std::int64_t peak_increase_bytes() const { return peak_bytes() - start_; }

private:
    using Allocator = std::variant<DeviceCachingAllocator*, AsyncDeviceAllocator*>;
    static Allocator pick(Device d) {
        auto& a = CachingAllocator::instance();
        if (a.backend() == Backend::async) return &a.async(d.index);
        return &a.device(d.index);
    }
    Allocator allocator_;
    std::int64_t peak_ = 0;
    std::int64_t start_ = 0;
};

}  // namespace tessel::memory
