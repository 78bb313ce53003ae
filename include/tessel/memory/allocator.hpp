// The public face of memory: device memory through the per-device caching allocators (allocate,
// deallocate, record_stream, empty_cache, statistics, memory_summary, snapshot, set_memory_fraction,
// MemoryScope) and pinned host memory through the pinned cache. Everything in tessel that needs
// device or pinned memory comes through here. The allocators themselves are in
// caching_allocator.hpp, device_allocator.hpp, async_allocator.hpp and host_allocator.hpp; with the
// runtime compiled separately (core/linkage.hpp) only its source includes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../core/linkage.hpp"
#include "../runtime/device.hpp"
#include "../stream/stream.hpp"
#include "config.hpp"
#include "snapshot.hpp"
#include "stats.hpp"

namespace tessel::memory {

// ---- device memory ------------------------------------------------------------------------------

// The backend serving device memory in this process (TESSEL_ALLOC_CONF=backend:...).
TESSEL_API Backend backend();
// `bytes` of device memory on the current device, for use on `stream` (nullptr: the default stream),
// which must be a live stream of that device.
TESSEL_API void* allocate(std::size_t bytes, rt::stream_t stream = nullptr);
// The same for a Stream, which must be of the current device (a default stream's null handle alone
// would pass as the current device's).
inline void* allocate(std::size_t bytes, const Stream& stream) {
    const int current = current_device().index;
    require(stream.device().index == current, "memory::allocate(", bytes, " bytes): stream ", static_cast<const void*>(stream.handle()),
            " belongs to device ", stream.device().index, ", but the memory is allocated on the current device ", current, "; make device ",
            stream.device().index, " current first (DeviceGuard) or pass a stream of device ", current);
    return allocate(bytes, stream.handle());
}
// Returns memory from allocate(); it is reused at once by work on its stream.
TESSEL_API void deallocate(void* p);
// Declares that work on `stream` (a stream of `stream_device`, by default the current device) uses
// `p`: after deallocate(p), the memory is not reused until the work queued on `stream` at that
// moment has completed.
// The stream and its device are checked here, not when the memory is freed.
TESSEL_API void record_stream(void* p, rt::stream_t stream, std::optional<Device> stream_device = std::nullopt);
// The same for a Stream, on the Stream's own device (a default stream's null handle alone would name
// the current device's).
inline void record_stream(void* p, const Stream& stream) { record_stream(p, stream.handle(), stream.device()); }
// True if `p` is the start of a live allocation of tessel's device allocator.
TESSEL_API bool owns(const void* p);
// Returns all cached, unused memory of every device to the runtime.
TESSEL_API void empty_cache();

// The statistics of device d's allocator.
TESSEL_API DeviceStats stats(Device d = current_device());
// PyTorch's names (torch.cuda.memory_allocated & co.), in bytes, for device d.
TESSEL_API std::int64_t allocated(Device d = current_device());
TESSEL_API std::int64_t max_allocated(Device d = current_device());
TESSEL_API std::int64_t reserved(Device d = current_device());
TESSEL_API std::int64_t max_reserved(Device d = current_device());
// Starts the peaks (max_allocated, max_reserved, every Stat's peak) again from the current values.
TESSEL_API void reset_peak_stats(Device d = current_device());
// Caps what tessel reserves on `d` at `fraction` of its memory; allocations beyond raise
// OutOfMemoryError. Native backend only (Unsupported under backend:async).
TESSEL_API void set_memory_fraction(double fraction, Device d = current_device());
// What is wrong with the bookkeeping of device `d`'s allocator (block chains, pools, statistics), one
// sentence per violation; empty when consistent (under backend:async: the live allocations and the
// statistics). For tests and fuzzers: it walks every block under the allocator's lock.
TESSEL_API std::vector<std::string> check_invariants(Device d = current_device());
// A text table of the statistics of device `d`, like torch.cuda.memory_summary().
TESSEL_API std::string memory_summary(Device d = current_device());
// The same table for statistics `s` labelled as device `device`, with `note` (if any) under its heading.
TESSEL_API std::string memory_summary(int device, const DeviceStats& s, const std::string& note = {});
// Every segment of every device with its blocks, in address order (empty under backend:async, whose
// pool does not expose its segments).
TESSEL_API std::vector<SegmentInfo> snapshot();

// Reports the peak of allocated device memory while it is alive (nested scopes each see their own):
//   tessel::memory::MemoryScope scope;  ...work...;  scope.peak_increase_bytes()
class MemoryScope {
public:
    TESSEL_API explicit MemoryScope(Device d = current_device());
    TESSEL_API ~MemoryScope();
    MemoryScope(const MemoryScope&) = delete;
    MemoryScope& operator=(const MemoryScope&) = delete;

    std::int64_t start_bytes() const { return start_; }  // allocated when the scope opened
    TESSEL_API std::int64_t peak_bytes() const;          // highest allocated since
    std::int64_t peak_increase_bytes() const { return peak_bytes() - start_; }

private:
    int device_;
    bool async_;  // served by the async backend's allocator
    std::int64_t peak_ = 0;
    std::int64_t start_ = 0;
};

// ---- pinned host memory -------------------------------------------------------------------------

// Pinned host memory from the cache.
TESSEL_API void* allocate_host(std::size_t bytes);
TESSEL_API void deallocate_host(void* p);
// Declares that work on `stream` (of `device`, by default the current one) uses the pinned block `p`
// (its reuse then waits for that work).
// The stream and its device are checked here, not when the block is freed.
TESSEL_API void record_host_use(void* p, rt::stream_t stream, std::optional<Device> device = std::nullopt);
inline void record_host_use(void* p, const Stream& stream) { record_host_use(p, stream.handle(), stream.device()); }
// True if `p` is the start of a live block of the pinned cache.
TESSEL_API bool owns_host(const void* p);
TESSEL_API HostStats host_stats();
// Returns the cached, unused pinned blocks to the runtime.
TESSEL_API void empty_host_cache();
// What is wrong with the pinned cache's bookkeeping, one sentence per violation; empty when
// consistent. For tests and fuzzers: it walks every block under the cache's lock.
TESSEL_API std::vector<std::string> check_host_invariants();

}  // namespace tessel::memory

#if TESSEL_DEFINE_RUNTIME
namespace tessel::detail {
// The device of `stream` for record_stream / record_host_use (`what`): the stated device (by default
// the current one), checked to exist and to own the stream.
inline int checked_stream_device(const char* what, rt::stream_t stream, std::optional<Device> stated) {
    const Device d = stated ? *stated : current_device();
    require(d.index >= 0 && d.index < device_count(), what, ": device ", d.index, " does not exist (", device_count(),
            " device(s) visible)");
    int actual = 0;
    {
        DeviceGuard g(d);  // the default stream handle means this device's default stream
        actual = rt::stream_device(stream);
    }
    require(actual == d.index, what, ": stream ", static_cast<const void*>(stream), " belongs to device ", actual, ", not to device ",
            d.index, stated ? " as stated" : ", the current one; pass the Stream itself or its device");
    return d.index;
}
}  // namespace tessel::detail

#include "caching_allocator.hpp"
#include "host_allocator.hpp"
#endif
