// The sim's stream-ordered allocator: cudaMallocAsync / cudaFreeAsync on one default memory pool per
// device. A block freed on stream S is reused at once by allocations on S, and by other streams once
// S has reached the free. The pool keeps freed blocks (best fit, never split) until cudaMemPoolTrimTo.
// Included at the end of runtime.hpp; including it first includes runtime.hpp, whose end then skips it.
#pragma once

#include "runtime.hpp"

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tessel::sim::api {
// The stream-ordered allocator calls, with the CUDA runtime's signatures and error codes.
TESSEL_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
TESSEL_API cudaError_t cudaMallocAsync(void** p, std::size_t n, cudaStream_t s);
TESSEL_API cudaError_t cudaMallocFromPoolAsync(void** p, std::size_t n, cudaMemPool_t pool, cudaStream_t s);
TESSEL_API cudaError_t cudaFreeAsync(void* p, cudaStream_t s);
TESSEL_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, std::size_t keep);
TESSEL_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
TESSEL_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
TESSEL_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* map, std::size_t count);
TESSEL_API cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t pool, cudaMemLocation* location);
}  // namespace tessel::sim::api

#if TESSEL_DEFINE_RUNTIME
#include "runtime_state.hpp"

struct CUmemPoolHandle_st {
    // A freed block and the point of its stream that must be reached before another stream reuses it.
    struct Freed {
        void* p;
        std::size_t size;
        std::shared_ptr<CUstream_st> stream;
        std::uint64_t seq;
    };
    int device = 0;
    std::mutex m;
    std::vector<Freed> freed;
    std::unordered_map<void*, std::size_t> in_use;
    std::uint64_t reserved = 0, reserved_high = 0, used = 0, used_high = 0, release_threshold = 0;
    std::map<int, cudaMemAccessFlags> access;  // other devices' access (cudaMemPoolSetAccess); absent: none
};

namespace tessel::sim::api {

namespace detail {
inline CUmemPoolHandle_st* default_pool(int device) {
    static std::mutex m;
    static auto* pools = new std::vector<std::unique_ptr<CUmemPoolHandle_st>>();  // never destroyed
    std::lock_guard lk(m);
    while (pools->size() <= std::size_t(device)) {
        pools->push_back(std::make_unique<CUmemPoolHandle_st>());
        pools->back()->device = int(pools->size()) - 1;
    }
    return (*pools)[std::size_t(device)].get();
}
// What `device` may do with `pool`'s memory: the owner read-write, others what cudaMemPoolSetAccess gave.
inline cudaMemAccessFlags pool_access(CUmemPoolHandle_st* pool, int device) {
    std::lock_guard lk(pool->m);
    const auto it = pool->access.find(device);
    return device == pool->device ? cudaMemAccessFlagsProtReadWrite : it == pool->access.end() ? cudaMemAccessFlagsProtNone : it->second;
}

inline std::string inaccessible_argument(const LaunchSpec& launch, int device) {
    {
        std::lock_guard lk(rt().m);
        if (rt().devices.size() < 2) return {};  // one device reaches all device memory there is
    }
    for (const auto& [position, offset, p] : launch.pointer_args) {
        Allocation a;
        {
            std::lock_guard lk(rt().m);
            const Allocation* found = rt().find(p, 0);
            if (!found) continue;  // host memory, or past an allocation's end (an end pointer): the sim cannot tell
            a = *found;
        }
        if (a.device < 0 || a.device == device || a.managed) continue;
        const std::string field = offset < 0 ? std::string() : ", bytes " + std::to_string(offset) + "-" +
                                                                   std::to_string(offset + int(sizeof(void*)) - 1) + " of the structure";
        const std::string where = "argument " + std::to_string(position) + " (" + hex_ptr(p) + field + ") points into device " +
                                  std::to_string(a.device) + "'s memory, ";
        const std::string grant = "tessel::enable_peer_access(Device{" + std::to_string(device) + "}, Device{" + std::to_string(a.device) + "})";
        if (a.pool) {
            if (pool_access(a.pool, device) != cudaMemAccessFlagsProtNone) continue;  // read-only taken as enough
            return where + "allocated from its memory pool, which grants device " + std::to_string(device) +
                   " no access (peer access does not reach pools: cudaMemPoolSetAccess on device " + std::to_string(a.device) +
                   "'s pool grants it; under TESSEL_ALLOC_CONF=backend:async " + grant + " does both)";
        }
        std::lock_guard lk(rt().m);
        if (rt().peer_enabled.count({device, a.device})) continue;
        return where + "and device " + std::to_string(device) + " has no peer access to it (" + grant + ")";
    }
    return {};
}

inline std::shared_ptr<CUstream_st> owner_of(CUstream_st* st) {
    std::lock_guard lk(rt().m);
    if (st->is_null) return rt().devices[std::size_t(st->device)].null_stream;
    return rt().streams.at(st);
}
}  // namespace detail

TESSEL_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
    if (device < 0 || device >= int(detail::rt().devices.size())) return detail::fail(cudaErrorInvalidDevice, "no such device");
    detail::use_context(device);  // the pool lives in the device's context
    *pool = detail::default_pool(device);
    return detail::ok();
}

TESSEL_API cudaError_t cudaMallocAsync(void** p, std::size_t n, cudaStream_t s) {
    *p = nullptr;
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    return ::tessel::sim::api::cudaMallocFromPoolAsync(p, n, detail::default_pool(detail::resolve(s)->device), s);  // the current pool
}

TESSEL_API cudaError_t cudaMallocFromPoolAsync(void** p, std::size_t n, cudaMemPool_t pool, cudaStream_t s) {
    *p = nullptr;
    if (!pool) return detail::fail(cudaErrorInvalidValue, "cudaMallocFromPoolAsync from a null pool");
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    if (n == 0) return detail::ok();
    CUstream_st* st = detail::resolve(s);
    detail::use_context(st->device);
    detail::use_context(pool->device);
    std::lock_guard lk(pool->m);
    std::size_t best = pool->freed.size();
    for (std::size_t i = 0; i < pool->freed.size(); ++i) {
        const auto& f = pool->freed[i];
        if (f.size < n || (best < pool->freed.size() && pool->freed[best].size <= f.size)) continue;
        if (f.stream.get() == st || f.stream->reached(f.seq)) best = i;
    }
    std::size_t size = n;
    if (best < pool->freed.size()) {
        *p = pool->freed[best].p;
        size = pool->freed[best].size;
        pool->freed.erase(pool->freed.begin() + std::ptrdiff_t(best));
    } else {
        const int saved = detail::current_device;
        detail::current_device = pool->device;
        const cudaError_t e = ::tessel::sim::api::cudaMalloc(p, n);
        detail::current_device = saved;
        if (e != cudaSuccess) return e;
        {
            std::lock_guard rk(detail::rt().m);
            detail::rt().allocations[reinterpret_cast<std::uintptr_t>(*p)].pool = pool;
        }
        pool->reserved += n;
        pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
    }
    pool->in_use[*p] = size;
    pool->used += size;
    pool->used_high = std::max(pool->used_high, pool->used);
    return detail::ok();
}

TESSEL_API cudaError_t cudaFreeAsync(void* p, cudaStream_t s) {
    if (!p) return detail::ok();
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    CUstream_st* st = detail::resolve(s);
    detail::use_context(st->device);
    // The memory goes back to the pool it came from, whichever device's stream frees it.
    CUmemPoolHandle_st* pool = nullptr;
    for (int d = 0; d < int(detail::rt().devices.size()) && !pool; ++d) {
        CUmemPoolHandle_st* candidate = detail::default_pool(d);
        std::lock_guard lk(candidate->m);
        if (candidate->in_use.count(p)) pool = candidate;
    }
    if (!pool) return detail::fail(cudaErrorInvalidValue, "cudaFreeAsync(" + hex_ptr(p) + "): not a live cudaMallocAsync allocation");
    std::lock_guard lk(pool->m);
    auto it = pool->in_use.find(p);
    if (it == pool->in_use.end())
        return detail::fail(cudaErrorInvalidValue, "cudaFreeAsync(" + hex_ptr(p) + "): not a live cudaMallocAsync allocation");
    const std::uint64_t seq = detail::enqueue(st, [] {});  // the stream reaches the free here
    pool->freed.push_back({p, it->second, detail::owner_of(st), seq});
    pool->used -= it->second;
    pool->in_use.erase(it);
    return detail::ok();
}

// Releases freed blocks whose frees have completed until at most `keep` bytes stay reserved.
TESSEL_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, std::size_t keep) {
    std::vector<void*> release;
    {
        std::lock_guard lk(pool->m);
        for (auto it = pool->freed.begin(); it != pool->freed.end() && pool->reserved > keep;) {
            if (!it->stream->reached(it->seq)) {
                ++it;
                continue;
            }
            release.push_back(it->p);
            pool->reserved -= it->size;
            it = pool->freed.erase(it);
        }
    }
    for (void* p : release)
        if (cudaError_t e = ::tessel::sim::api::cudaFree(p); e != cudaSuccess) return e;
    return detail::ok();
}

TESSEL_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
    std::lock_guard lk(pool->m);
    auto* v = static_cast<std::uint64_t*>(value);
    switch (attr) {
        case cudaMemPoolAttrReservedMemCurrent: *v = pool->reserved; break;
        case cudaMemPoolAttrReservedMemHigh: *v = pool->reserved_high; break;
        case cudaMemPoolAttrUsedMemCurrent: *v = pool->used; break;
        case cudaMemPoolAttrUsedMemHigh: *v = pool->used_high; break;
        case cudaMemPoolAttrReleaseThreshold: *v = pool->release_threshold; break;
        default: return detail::fail(cudaErrorInvalidValue, "the sim does not model memory pool attribute " + std::to_string(int(attr)));
    }
    return detail::ok();
}

TESSEL_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
    std::lock_guard lk(pool->m);
    const std::uint64_t v = *static_cast<const std::uint64_t*>(value);
    switch (attr) {
        case cudaMemPoolAttrReleaseThreshold: pool->release_threshold = v; break;
        case cudaMemPoolAttrReservedMemHigh: pool->reserved_high = pool->reserved; break;  // only 0 (reset) is valid
        case cudaMemPoolAttrUsedMemHigh: pool->used_high = pool->used; break;
        default: return detail::fail(cudaErrorInvalidValue, "the sim cannot set memory pool attribute " + std::to_string(int(attr)));
    }
    return detail::ok();
}

// Which devices may access the pool's memory, as cudaMemPoolSetAccess: every descriptor is checked
// before any applies; the owning device always has read-write access, and a device may be granted
// access only where it can access the owner as a peer.
TESSEL_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t pool, const cudaMemAccessDesc* map, std::size_t count) {
    const int n = int(detail::rt().devices.size());
    if (!pool || (!map && count)) return detail::fail(cudaErrorInvalidValue, "cudaMemPoolSetAccess with a null pool or descriptor list");
    for (std::size_t i = 0; i < count; ++i) {
        const cudaMemAccessDesc& d = map[i];
        if (d.location.type != cudaMemLocationTypeDevice || d.location.id < 0 || d.location.id >= n)
            return detail::fail(cudaErrorInvalidValue, "cudaMemPoolSetAccess: descriptor " + std::to_string(i) + " names no device");
        if (d.flags != cudaMemAccessFlagsProtNone && d.flags != cudaMemAccessFlagsProtRead && d.flags != cudaMemAccessFlagsProtReadWrite)
            return detail::fail(cudaErrorInvalidValue, "cudaMemPoolSetAccess: descriptor " + std::to_string(i) + " has unknown flags");
        if (d.location.id == pool->device && d.flags != cudaMemAccessFlagsProtReadWrite)
            return detail::fail(cudaErrorInvalidValue, "cudaMemPoolSetAccess: the owning device's access must stay read-write");
        int can = 0;
        if (d.location.id != pool->device && d.flags != cudaMemAccessFlagsProtNone &&
            (::tessel::sim::api::cudaDeviceCanAccessPeer(&can, d.location.id, pool->device), !can))
            return detail::fail(cudaErrorInvalidValue, "cudaMemPoolSetAccess: device " + std::to_string(d.location.id) +
                                                           " cannot access device " + std::to_string(pool->device) + " as a peer");
    }
    std::lock_guard lk(pool->m);
    for (std::size_t i = 0; i < count; ++i)
        if (map[i].location.id != pool->device) pool->access[map[i].location.id] = map[i].flags;
    return detail::ok();
}
TESSEL_API cudaError_t cudaMemPoolGetAccess(cudaMemAccessFlags* flags, cudaMemPool_t pool, cudaMemLocation* location) {
    if (!flags || !pool || !location || location->type != cudaMemLocationTypeDevice || location->id < 0 ||
        location->id >= int(detail::rt().devices.size()))
        return detail::fail(cudaErrorInvalidValue, "cudaMemPoolGetAccess: a null argument, or a location that is no device");
    *flags = detail::pool_access(pool, location->id);
    return detail::ok();
}

}  // namespace tessel::sim::api
#endif  // TESSEL_DEFINE_RUNTIME
