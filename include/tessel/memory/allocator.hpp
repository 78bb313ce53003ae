// The public face of device memory: allocate/deallocate through the per-device caching allocators,
// record_stream, empty_cache, statistics, memory_summary, snapshot, set_memory_fraction and
// MemoryScope. Everything in tessel that needs device memory comes through here.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_allocator.hpp"

namespace tessel::memory {

// The process's device allocators (one per device) and the map from pointers to their blocks.
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
        Block* b = device(dev).malloc(bytes, stream);
        std::lock_guard lk(map_m_);
        blocks_.emplace(b->ptr, b);
        return b->ptr;
    }

    void deallocate(void* p) {
        if (!p) return;
        Block* b = take(p);
        device(b->device).free(b);
    }

    void record_stream(void* p, rt::stream_t stream) {
        Block* b = nullptr;
        {
            std::lock_guard lk(map_m_);
            auto it = blocks_.find(p);
            require(it != blocks_.end(), "record_stream: pointer ", p,
                    " is not the start of a live allocation of tessel's caching allocator");
            b = it->second;
        }
        device(b->device).record_stream(b, stream);
    }

    DeviceCachingAllocator& device(int d) {
        require(d >= 0 && d < int(devices_.size()), "device ", d, " does not exist: ", devices_.size(),
                " device(s) are visible");
        return *devices_[std::size_t(d)];
    }
    int device_count() const { return int(devices_.size()); }

private:
    CachingAllocator() {
        for (int d = 0; d < tessel::device_count(); ++d) devices_.push_back(std::make_unique<DeviceCachingAllocator>(d));
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

    std::vector<std::unique_ptr<DeviceCachingAllocator>> devices_;
    std::mutex map_m_;
    std::unordered_map<void*, Block*> blocks_;
};

// `bytes` of device memory on the current device, for use on `stream` (nullptr: the default stream).
inline void* allocate(std::size_t bytes, rt::stream_t stream = nullptr) {
    return CachingAllocator::instance().allocate(bytes, stream);
}
// Returns memory from allocate(); it is reused at once by work on its stream.
inline void deallocate(void* p) { CachingAllocator::instance().deallocate(p); }
// Declares that work on `stream` uses `p`: after deallocate(p), the memory is not reused until the
// work queued on `stream` at that moment has completed.
inline void record_stream(void* p, rt::stream_t stream) { CachingAllocator::instance().record_stream(p, stream); }

// Returns all cached, unused memory of every device to the runtime.
inline void empty_cache() {
    auto& a = CachingAllocator::instance();
    for (int d = 0; d < a.device_count(); ++d) a.device(d).empty_cache();
}

inline DeviceStats stats(Device d = current_device()) { return CachingAllocator::instance().device(d.index).stats(); }
inline void reset_peak_stats(Device d = current_device()) { CachingAllocator::instance().device(d.index).reset_peak_stats(); }
// Caps what tessel reserves on `d` at `fraction` of its memory; allocations beyond raise OutOfMemoryError.
inline void set_memory_fraction(double fraction, Device d = current_device()) {
    CachingAllocator::instance().device(d.index).set_memory_fraction(fraction);
}
// A text table of the statistics of device `d`.
inline std::string memory_summary(Device d = current_device()) {
    return memory_summary(d.index, CachingAllocator::instance().device(d.index).stats());
}
// Every segment of every device with its blocks, in address order.
inline std::vector<SegmentInfo> snapshot() {
    std::vector<SegmentInfo> all;
    auto& a = CachingAllocator::instance();
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
    explicit MemoryScope(Device d = current_device())
        : allocator_(&CachingAllocator::instance().device(d.index)), start_(allocator_->open_scope(&peak_)) {}
    ~MemoryScope() { allocator_->close_scope(&peak_); }
    MemoryScope(const MemoryScope&) = delete;
    MemoryScope& operator=(const MemoryScope&) = delete;

    std::int64_t start_bytes() const { return start_; }                     // allocated when the scope opened
    std::int64_t peak_bytes() const { return allocator_->read_scope(&peak_); }  // highest allocated since
    std::int64_t peak_increase_bytes() const { return peak_bytes() - start_; }

private:
    DeviceCachingAllocator* allocator_;
    std::int64_t peak_ = 0;
    std::int64_t start_;
};

}  // namespace tessel::memory
