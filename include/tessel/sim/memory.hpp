// The simulated runtime's memory calls: device memory (host memory counted against each device's
// capacity), pinned host memory, managed memory, copies, fills and copies between devices, as
// declared in runtime.hpp. Included at the end of runtime.hpp; including it first includes
// runtime.hpp, whose end then includes it.
#pragma once

#include "runtime.hpp"

#if TESSEL_DEFINE_RUNTIME
#include <cstdlib>
#include <cstring>

#include "runtime_state.hpp"

namespace tessel::sim::api {

// ---- memory -------------------------------------------------------------------------------------
TESSEL_API cudaError_t cudaMalloc(void** p, std::size_t n) {
    detail::use_context();
    *p = nullptr;
    if (n == 0) return detail::ok();
    Runtime& r = detail::rt();
    std::unique_lock lk(r.m);
    SimDevice& d = r.devices[std::size_t(detail::current_device)];
    if (n > d.capacity - d.used)
        return detail::fail(cudaErrorMemoryAllocation,
                            "sim device " + std::to_string(detail::current_device) + ": cannot allocate " +
                                std::to_string(n) + " bytes; " + std::to_string(d.used) + " of " +
                                std::to_string(d.capacity) + " bytes in use (capacity: TESSEL_SIM_MEMORY)");
    void* mem = nullptr;
    if (::posix_memalign(&mem, 256, n) != 0)
        return detail::fail(cudaErrorMemoryAllocation, "host memory behind the sim device is exhausted");
    d.used += n;
    r.allocations[reinterpret_cast<std::uintptr_t>(mem)] = Allocation{n, detail::current_device};
    lk.unlock();
    // Fresh device memory holds garbage on a GPU; the sim makes it 0xFF bytes (NaN as float).
    if (n <= (std::size_t(256) << 20)) std::memset(mem, 0xFF, n);
    *p = mem;
    return detail::ok();
}
// Unified memory: in the sim all memory is host memory, so managed memory is device memory that the
// pointer attributes call managed; prefetch and advice are validated and ordered, then have no effect.
TESSEL_API cudaError_t cudaMallocManaged(void** p, std::size_t n, unsigned flags) {
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
        return detail::fail(cudaErrorInvalidValue, "cudaMallocManaged flags " + std::to_string(flags) + " are not cudaMemAttachGlobal or cudaMemAttachHost");
    if (auto e = ::tessel::sim::api::cudaMalloc(p, n); e != cudaSuccess) return e;
    if (*p) {
        std::lock_guard lk(detail::rt().m);
        detail::rt().allocations[reinterpret_cast<std::uintptr_t>(*p)].managed = true;
    }
    return detail::ok();
}
TESSEL_API cudaError_t cudaMemPrefetchAsync(const void* p, std::size_t n, cudaMemLocation to, unsigned, cudaStream_t s) {
    {
        std::lock_guard lk(detail::rt().m);
        const Allocation* a = detail::rt().find(p, n);
        if (!a || !a->managed)
            return detail::fail(cudaErrorInvalidValue, "cudaMemPrefetchAsync: " + hex_ptr(p) + " (+" + std::to_string(n) +
                                                           " bytes) is not inside a managed allocation");
    }
    if (to.type == cudaMemLocationTypeDevice && (to.id < 0 || to.id >= int(detail::rt().devices.size())))
        return detail::fail(cudaErrorInvalidDevice, "cudaMemPrefetchAsync to device " + std::to_string(to.id) + ", which does not exist");
    if (to.type != cudaMemLocationTypeDevice && to.type != cudaMemLocationTypeHost)
        return detail::fail(cudaErrorInvalidValue, "cudaMemPrefetchAsync: location is neither a device nor the host");
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    detail::enqueue(detail::resolve(s), [] {});
    return detail::ok();
}
TESSEL_API cudaError_t cudaMemAdvise(const void* p, std::size_t n, cudaMemoryAdvise, cudaMemLocation) {
    std::lock_guard lk(detail::rt().m);
    const Allocation* a = detail::rt().find(p, n);
    if (!a || !a->managed)
        return detail::fail(cudaErrorInvalidValue, "cudaMemAdvise: " + hex_ptr(p) + " is not inside a managed allocation");
    return detail::ok();
}
TESSEL_API cudaError_t cudaFree(void* p) {
    detail::use_context();  // cudaFree(nullptr) is the usual way to make the context
    if (!p) return detail::ok();
    // cudaFree synchronises the device, so no queued kernel still uses the memory.
    {
        std::lock_guard lk(detail::rt().m);
        auto it = detail::rt().allocations.find(reinterpret_cast<std::uintptr_t>(p));
        if (it == detail::rt().allocations.end() || it->second.device < 0)
            return detail::fail(cudaErrorInvalidValue, "cudaFree(" + hex_ptr(p) + "): not the start of a live device allocation");
    }
    const int saved = detail::current_device;
    int dev = 0;
    {
        std::lock_guard lk(detail::rt().m);
        dev = detail::rt().allocations[reinterpret_cast<std::uintptr_t>(p)].device;
    }
    detail::current_device = dev;
    cudaError_t pending = ::tessel::sim::api::cudaDeviceSynchronize();
    detail::current_device = saved;
    {
        std::lock_guard lk(detail::rt().m);
        auto it = detail::rt().allocations.find(reinterpret_cast<std::uintptr_t>(p));
        if (it == detail::rt().allocations.end())
            return detail::fail(cudaErrorInvalidValue, "cudaFree(" + hex_ptr(p) + "): freed twice concurrently");
        detail::rt().devices[std::size_t(it->second.device)].used -= it->second.size;
        detail::rt().allocations.erase(it);
    }
    std::free(p);
    return pending;
}
TESSEL_API cudaError_t cudaMallocHost(void** p, std::size_t n) {
    detail::use_context();
    *p = nullptr;
    if (n == 0) return detail::ok();
    // Page-locked memory cannot exceed physical memory (and AddressSanitizer aborts on absurd sizes).
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0 && n > std::size_t(pages) * std::size_t(page))
        return detail::fail(cudaErrorMemoryAllocation, "cannot pin " + std::to_string(n) + " bytes: the machine has " +
                                                           std::to_string(std::size_t(pages) * std::size_t(page)) + " bytes");
    void* mem = nullptr;
    if (::posix_memalign(&mem, 4096, n) != 0) return detail::fail(cudaErrorMemoryAllocation, "pinned host allocation failed");
    std::lock_guard lk(detail::rt().m);
    detail::rt().allocations[reinterpret_cast<std::uintptr_t>(mem)] = Allocation{n, -1};
    *p = mem;
    return detail::ok();
}
TESSEL_API cudaError_t cudaHostAlloc(void** p, std::size_t n, unsigned) { return ::tessel::sim::api::cudaMallocHost(p, n); }
TESSEL_API cudaError_t cudaFreeHost(void* p) {
    if (!p) return detail::ok();
    {
        std::lock_guard lk(detail::rt().m);
        auto it = detail::rt().allocations.find(reinterpret_cast<std::uintptr_t>(p));
        if (it == detail::rt().allocations.end() || it->second.device >= 0)
            return detail::fail(cudaErrorInvalidValue, "cudaFreeHost(" + hex_ptr(p) + "): not a pinned host allocation");
        detail::rt().allocations.erase(it);
    }
    std::free(p);
    return detail::ok();
}
TESSEL_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
    *a = cudaPointerAttributes{};
    std::lock_guard lk(detail::rt().m);
    const Allocation* al = detail::rt().find(p, 1);
    if (!al) {
        a->type = cudaMemoryTypeUnregistered;
        a->device = -2;
    } else if (al->device < 0) {
        a->type = cudaMemoryTypeHost;
        a->hostPointer = const_cast<void*>(p);
        a->device = 0;
    } else {
        a->type = al->managed ? cudaMemoryTypeManaged : cudaMemoryTypeDevice;
        a->devicePointer = const_cast<void*>(p);
        if (al->managed) a->hostPointer = const_cast<void*>(p);
        a->device = al->device;
    }
    return detail::ok();
}

TESSEL_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    if (n == 0) return detail::ok();
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault) {
        dst_dev = detail::is_device_pointer(dst);
        src_dev = detail::is_device_pointer(src);
    } else if (kind != cudaMemcpyHostToHost && !dst_dev && !src_dev) {
        return detail::fail(cudaErrorInvalidMemcpyDirection, "invalid cudaMemcpyKind " + std::to_string(int(kind)));
    }
    if (dst_dev)
        if (auto e = detail::check_device_range(dst, n, "destination"); e != cudaSuccess) return e;
    if (src_dev)
        if (auto e = detail::check_device_range(src, n, "source"); e != cudaSuccess) return e;
    CUstream_st* st = detail::resolve(s);
    const std::uint64_t seq = detail::enqueue(st, [=] { std::memmove(dst, src, n); }, true);
    // With pageable host memory CUDA returns only once the host buffer has been read (H2D, staged)
    // or written (D2H), so the caller may reuse it at once; the sim waits for the copy.
    if ((!dst_dev && !detail::is_pinned(dst)) || (!src_dev && !detail::is_pinned(src))) st->wait_for(seq);
    return detail::ok();
}
TESSEL_API cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind) {
    if (auto e = ::tessel::sim::api::cudaMemcpyAsync(dst, src, n, kind, nullptr); e != cudaSuccess) return e;
    CUstream_st* s = detail::resolve(nullptr);
    s->wait_for(s->tail());
    return detail::report(s);
}
TESSEL_API cudaError_t cudaMemsetAsync(void* p, int value, std::size_t n, cudaStream_t s) {
    if (n == 0) return detail::ok();
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    if (auto e = detail::check_device_range(p, n, "cudaMemset destination"); e != cudaSuccess) return e;
    detail::enqueue(detail::resolve(s), [=] { std::memset(p, value, n); }, true);
    return detail::ok();
}
TESSEL_API cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
    const int n = int(detail::rt().devices.size());
    if (!can || device < 0 || device >= n || peer < 0 || peer >= n) return detail::fail(cudaErrorInvalidDevice, "cudaDeviceCanAccessPeer: no device " + std::to_string(device < 0 || device >= n ? device : peer));
    *can = device != peer && config().peer_access ? 1 : 0;
    return detail::ok();
}
TESSEL_API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
    const int device = detail::current_device;
    int can = 0;
    if (auto e = ::tessel::sim::api::cudaDeviceCanAccessPeer(&can, device, peer); e != cudaSuccess) return e;
    if (flags != 0) return detail::fail(cudaErrorInvalidValue, "cudaDeviceEnablePeerAccess: flags must be 0");
    if (!can) return detail::fail(cudaErrorPeerAccessUnsupported, "device " + std::to_string(device) + " cannot access device " + std::to_string(peer));
    detail::use_context(device);  // both contexts: the mapping is made between them
    detail::use_context(peer);
    std::lock_guard lk(detail::rt().m);
    if (!detail::rt().peer_enabled.insert({device, peer}).second)
        return detail::fail(cudaErrorPeerAccessAlreadyEnabled, "peer access from device " + std::to_string(device) + " to " + std::to_string(peer) + " is already enabled");
    return detail::ok();
}
TESSEL_API cudaError_t cudaDeviceDisablePeerAccess(int peer) {
    std::lock_guard lk(detail::rt().m);
    if (detail::rt().peer_enabled.erase({detail::current_device, peer}) == 0)
        return detail::fail(cudaErrorPeerAccessNotEnabled, "peer access from device " + std::to_string(detail::current_device) + " to " + std::to_string(peer) + " is not enabled");
    return detail::ok();
}
TESSEL_API cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, std::size_t n, cudaStream_t s) {
    const int count = int(detail::rt().devices.size());
    if (dst_device < 0 || dst_device >= count || src_device < 0 || src_device >= count)
        return detail::fail(cudaErrorInvalidDevice, "cudaMemcpyPeerAsync: no device " + std::to_string(dst_device < 0 || dst_device >= count ? dst_device : src_device));
    if (n == 0) return detail::ok();
    {
        std::lock_guard lk(detail::rt().m);
        const Allocation* d = detail::rt().find(dst, n);
        const Allocation* sa = detail::rt().find(src, n);
        if (!d || d->device != dst_device) return detail::fail(cudaErrorInvalidValue, "cudaMemcpyPeerAsync: the destination is not " + std::to_string(n) + " bytes of device " + std::to_string(dst_device) + "'s memory");
        if (!sa || sa->device != src_device) return detail::fail(cudaErrorInvalidValue, "cudaMemcpyPeerAsync: the source is not " + std::to_string(n) + " bytes of device " + std::to_string(src_device) + "'s memory");
        const bool direct = detail::rt().peer_enabled.count({dst_device, src_device}) || detail::rt().peer_enabled.count({src_device, dst_device});
        (direct ? detail::rt().peer_copies : detail::rt().staged_copies).fetch_add(1, std::memory_order_relaxed);
    }
    return ::tessel::sim::api::cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s);
}
TESSEL_API cudaError_t cudaMemset(void* p, int value, std::size_t n) {
    if (auto e = ::tessel::sim::api::cudaMemsetAsync(p, value, n, nullptr); e != cudaSuccess) return e;
    CUstream_st* s = detail::resolve(nullptr);
    s->wait_for(s->tail());
    return detail::report(s);
}

}  // namespace tessel::sim::api
#endif  // TESSEL_DEFINE_RUNTIME
