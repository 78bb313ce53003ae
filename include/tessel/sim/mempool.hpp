// The sim's stream-ordered allocator: cudaMallocAsync / cudaFreeAsync on one default memory pool per
// device. A block freed on stream S is reused at once by allocations on S, and by other streams once
// S has reached the free. The pool keeps freed blocks (best fit, never split) until cudaMemPoolTrimTo.
// Included at the end of runtime.hpp; including it first includes runtime.hpp, whose end then skips it.
#pragma once

#include "runtime.hpp"

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tessel::sim::api {
// The stream-ordered allocator calls, with the CUDA runtime's signatures and error codes.
TESSEL_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device);
TESSEL_API cudaError_t cudaMallocAsync(void** p, std::size_t n, cudaStream_t s);
TESSEL_API cudaError_t cudaFreeAsync(void* p, cudaStream_t s);
TESSEL_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, std::size_t keep);
TESSEL_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
TESSEL_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
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
inline std::shared_ptr<CUstream_st> owner_of(CUstream_st* st) {
    std::lock_guard lk(rt().m);
    if (st->is_null) return rt().devices[std::size_t(st->device)].null_stream;
    return rt().streams.at(st);
}
}  // namespace detail

TESSEL_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
    if (device < 0 || device >= int(detail::rt().devices.size())) return detail::fail(cudaErrorInvalidDevice, "no such device");
    *pool = detail::default_pool(device);
    return detail::ok();
}

TESSEL_API cudaError_t cudaMallocAsync(void** p, std::size_t n, cudaStream_t s) {
    *p = nullptr;
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    if (n == 0) return detail::ok();
    CUstream_st* st = detail::resolve(s);
    CUmemPoolHandle_st* pool = detail::default_pool(st->device);
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
        detail::current_device = st->device;
        const cudaError_t e = ::tessel::sim::api::cudaMalloc(p, n);
        detail::current_device = saved;
        if (e != cudaSuccess) return e;
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
    CUmemPoolHandle_st* pool = detail::default_pool(st->device);
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

}  // namespace tessel::sim::api
#endif  // TESSEL_DEFINE_RUNTIME
