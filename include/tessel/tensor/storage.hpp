// The memory behind tensors: a refcounted block in one memory space, freed through its deleter when
// the last tensor viewing it goes away (so a view can never outlive its memory).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unistd.h>
#include <vector>

#include "../memory/allocator.hpp"
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

// The machine's physical memory in bytes (the largest host allocation that can succeed).
inline std::size_t physical_memory_bytes() {
    static const std::size_t bytes = [] {
        const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
        return pages > 0 && size > 0 ? std::size_t(pages) * std::size_t(size) : std::size_t(1) << 46;
    }();
    return bytes;
}

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
                auto s = std::make_shared<Storage>(p, bytes, space, device, [](void* q) { memory::deallocate(q); });
                s->note_write(stream, device);
                return s;
            }
            case MemorySpace::pinned:
                if (bytes > physical_memory_bytes())  // the pinned cache's rounding would wrap; it cannot succeed anyway
                    fail<OutOfMemoryError>("out of pinned host memory: tried to allocate ", bytes, " bytes, more than the machine's ",
                                           physical_memory_bytes(), " bytes of memory; use smaller tensors");
                return std::make_shared<Storage>(memory::allocate_host(bytes), bytes, space, device,
                                                 [](void* q) { memory::deallocate_host(q); });
            case MemorySpace::managed: {  // not cached: managed memory is for occasional large buffers
                DeviceGuard g(device);
                auto s = std::make_shared<Storage>(bytes ? rt::malloc_managed(bytes) : nullptr, bytes, space, device,
                                                   [](void* q) { rt::free_device(q); });
                s->note_write(stream, device);
                return s;
            }
            case MemorySpace::host: {
                // More than the machine's memory cannot succeed (and would wrap the rounding below).
                const std::size_t physical = physical_memory_bytes();
                if (bytes > physical)
                    fail<OutOfMemoryError>("out of host memory: tried to allocate ", bytes, " bytes, more than the machine's ",
                                           physical, " bytes of memory; use smaller tensors");
                void* p = bytes ? std::aligned_alloc(64, (bytes + 63) / 64 * 64) : nullptr;
                if (bytes && !p)
                    fail<OutOfMemoryError>("out of host memory: tried to allocate ", bytes,
                                           " bytes; free host tensors you no longer need or use smaller sizes");
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

    // Work tessel queued on this memory that may not have finished, one entry per stream (and that
    // stream's device): writes (the allocation stream's at first), and for host memory the reads of
    // asynchronous copies, which a host write must not overtake. Readers on other streams or on the
    // host (item(), to_vector(), copies) are ordered after every pending write, so two streams may
    // each write part of one tensor concurrently; host writers wait for the reads too. Work the
    // caller queues itself (a raw launch on t.data()) is the caller's to order, as in CUDA.
    struct Pending {
        rt::stream_t stream = nullptr;
        Device device{};
        bool write = false;       // a write among this stream's accesses (else only reads)
        std::uint64_t count = 0;  // the number of its latest access
    };
    // The pending writes (reads too when `reads`), as they stand now.
    std::vector<Pending> pending(bool reads = false) const {
        std::lock_guard lk(m_);
        std::vector<Pending> out;
        for (const Pending& p : pending_)
            if (p.write || reads) out.push_back(p);
        return out;
    }
    void note_write(rt::stream_t stream, Device device) const { note(stream, device, true); }
    // A queued read of host memory (an asynchronous copy from pinned memory).
    void note_read(rt::stream_t stream, Device device) const { note(stream, device, false); }
    // `stream` of `device` was made to wait for every write pending when `pending(false)` returned
    // `count`: if that stream's next access is a write, the entries it waited for are behind it.
    void ordered_after(rt::stream_t stream, Device device, std::uint64_t count) const {
        std::lock_guard lk(m_);
        ordered_ = {stream, device, true, count};
    }
    // The number of the latest access noted so far.
    std::uint64_t accesses() const {
        std::lock_guard lk(m_);
        return count_;
    }
    // Forgets `p` once it is known to have finished, unless its stream has a newer access since.
    void landed(const Pending& p) const {
        std::lock_guard lk(m_);
        std::erase_if(pending_, [&](const Pending& q) { return q.stream == p.stream && q.device == p.device && q.count == p.count; });
    }

private:
    void* data_;
    std::size_t bytes_;
    MemorySpace space_;
    Device device_;
    Deleter deleter_;
    void note(rt::stream_t stream, Device device, bool write) const {
        std::lock_guard lk(m_);
        // A write on a stream that has waited for every pending write (and nothing noted since)
        // comes after them: only this stream's entry and the entries of reads need to stay.
        if (write && ordered_.write && ordered_.count == count_ && ordered_.stream == stream && ordered_.device == device)
            std::erase_if(pending_, [&](const Pending& q) { return q.write && !(q.stream == stream && q.device == device); });
        ordered_ = {};
        ++count_;
        for (Pending& q : pending_)
            if (q.stream == stream && q.device == device) {
                q.write = q.write || write;
                q.count = count_;
                return;
            }
        pending_.push_back({stream, device, write, count_});
    }

    mutable std::mutex m_;  // the members below
    mutable std::vector<Pending> pending_;
    mutable Pending ordered_;  // see ordered_after (write: set)
    mutable std::uint64_t count_ = 0;
};

namespace detail {
// Returns once every write tessel queued on `s` has landed (host reads of pinned memory); with
// `reads`, once the queued reads of it have finished too (host writes).
inline void host_wait_for_last_write(const Storage& s, bool reads = false) {
    for (const Storage::Pending& p : s.pending(reads)) {
        DeviceGuard g(p.device);
        rt::stream_synchronize(p.stream);
        s.landed(p);
    }
}
// Returns once nothing tessel queued reads or writes `s` (before the host writes it).
inline void host_wait_for_access(const Storage& s) { host_wait_for_last_write(s, true); }

// Makes work queued on `stream` of `device` after this call wait for everything queued so far on
// `after` of `after_device`: one event recorded there and waited for here, no host wait. The event
// is one per device and host thread, reused: a wait takes the event's state at the call.
inline void stream_wait_for(rt::stream_t stream, Device device, rt::stream_t after, Device after_device) {
    if (stream == after && device == after_device) return;
    struct Events {  // destroyed with the thread, so no event outlives its thread's use
        std::vector<rt::event_t> per_device;
        ~Events() {
            for (rt::event_t e : per_device)
                if (e) (void)rt::api::cudaEventDestroy(e);
        }
    };
    static thread_local Events events;
    const auto d = std::size_t(after_device.index);
    if (events.per_device.size() <= d) events.per_device.resize(d + 1, nullptr);
    {
        DeviceGuard g(after_device);  // an event is recorded on its own device's stream
        if (!events.per_device[d]) events.per_device[d] = rt::event_create(false);
        rt::event_record(events.per_device[d], after);
    }
    DeviceGuard g(device);  // a null `stream` is this device's default stream
    rt::stream_wait_event(stream, events.per_device[d]);
}

// Makes work queued on `stream` of `device` after this call wait for every write tessel queued on
// `s` that may be pending (on other streams, or other devices'), through stream_wait_for. The
// default stream is nullptr on every device, so streams are told apart by handle and device. Host
// memory (pinned) written by a queued copy is waited for on the host.
inline void order_after_last_write(const Storage& s, rt::stream_t stream, Device device) {
    if (is_plain_host(s.space())) return host_wait_for_last_write(s);  // read by the host or a copy
    const std::uint64_t count = s.accesses();
    for (const Storage::Pending& p : s.pending())
        if (!(p.stream == stream && p.device == device)) stream_wait_for(stream, device, p.stream, p.device);
    s.ordered_after(stream, device, count);
}
}  // namespace detail

}  // namespace tessel
