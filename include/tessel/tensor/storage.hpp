// The memory behind tensors: a refcounted block in one memory space, freed through its deleter when
// the last tensor viewing it goes away (so a view can never outlive its memory).
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "../memory/allocator.hpp"
#include "../memory/host_allocator.hpp"
#include "../runtime/device.hpp"

namespace tessel {

// Where a tensor's memory lives.
enum class MemorySpace {
    device,  // device memory from the caching allocator
    host,    // ordinary (pageable) host memory
    pinned,  // page-locked host memory from the pinned cache (fast, asynchronous copies)
    managed, // unified memory: one address for host and device, migrated on demand or by prefetch
};

inline const char* space_name(MemorySpace s) {
    switch (s) {
        case MemorySpace::device: return "device";
        case MemorySpace::host: return "host";
        case MemorySpace::pinned: return "pinned";
        case MemorySpace::managed: return "managed";
    }
    return "?";
}

// True where the CPU may read and write with plain memcpy at any time (no stream to wait for).
inline bool is_plain_host(MemorySpace s) { return s == MemorySpace::host || s == MemorySpace::pinned; }

// One block of memory shared by every tensor that views it.
class Storage {
public:
    using Deleter = std::function<void(void*)>;

    // `bytes` of fresh memory in `space` (device: on `device`, for use on `stream`).
    static std::shared_ptr<Storage> allocate(std::size_t bytes, MemorySpace space, Device device, rt::stream_t stream) {
        switch (space) {
            case MemorySpace::device: {
                DeviceGuard g(device);
                void* p = memory::allocate(bytes, stream);
                return std::make_shared<Storage>(p, bytes, space, device, [](void* q) { memory::deallocate(q); });
            }
            case MemorySpace::pinned:
                return std::make_shared<Storage>(memory::allocate_host(bytes), bytes, space, device,
                                                 [](void* q) { memory::deallocate_host(q); });
            case MemorySpace::managed: {  // not cached: managed memory is for occasional large buffers
                DeviceGuard g(device);
                return std::make_shared<Storage>(bytes ? rt::malloc_managed(bytes) : nullptr, bytes, space, device,
                                                 [](void* q) { rt::free_device(q); });
            }
            case MemorySpace::host: {
                void* p = bytes ? std::aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr;
                if (bytes && !p) fail<OutOfMemoryError>("out of host memory: tried to allocate ", bytes, " bytes");
                return std::make_shared<Storage>(p, bytes, space, device, [](void* q) { std::free(q); });
            }
        }
        fail<InvalidArgument>("unknown memory space");
    }

    // Memory someone else owns; `deleter` (may be empty) runs when the last tensor lets go.
    static std::shared_ptr<Storage> wrap(void* p, std::size_t bytes, MemorySpace space, Device device, Deleter deleter) {
        return std::make_shared<Storage>(p, bytes, space, device, std::move(deleter));
    }

    Storage(void* p, std::size_t bytes, MemorySpace space, Device device, Deleter deleter)
        : data_(p), bytes_(bytes), space_(space), device_(device), deleter_(std::move(deleter)) {}
    ~Storage() {
        if (!deleter_) return;
        try {
            deleter_(data_);  // also for empty storage: a foreign owner may still need its release
        } catch (const std::exception& e) {  // a destructor must not throw; say what was lost
            std::fprintf(stderr, "tessel: releasing %zu bytes of %s memory failed: %s\n", bytes_, space_name(space_), e.what());
        }
    }
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    void* data() const { return data_; }
    std::size_t bytes() const { return bytes_; }
    MemorySpace space() const { return space_; }
    Device device() const { return device_; }
    bool on_device() const { return space_ == MemorySpace::device; }

private:
    void* data_;
    std::size_t bytes_;
    MemorySpace space_;
    Device device_;
    Deleter deleter_;
};

}  // namespace tessel
