// tessel::rt: checked runtime calls (memory, copies, streams, events, synchronisation) in one place,
// for both backends. Higher layers (allocator, tensors, ops) call these, never the runtime directly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "api.hpp"

// nvcc --default-stream per-thread makes the null stream handle mean each host thread's own stream:
// tessel's default streams (a null handle) would then be many streams under one handle, and the
// caching allocator would hand one thread's freed memory to another's work at once.
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM) && defined(TESSEL_BACKEND_CUDA)
#error "tessel needs the legacy default stream: build without --default-stream per-thread (use tessel::Stream::create() for streams of your own)"
#endif

namespace tessel::rt {

// Device memory straight from the runtime (the caching allocator sits above this). Throws
// OutOfMemoryError with the device's free and total memory when the runtime has none to give.
inline void* malloc_device(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = api::cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)api::cudaGetLastError();
        std::size_t free_b = 0, total_b = 0;
        (void)api::cudaMemGetInfo(&free_b, &total_b);
        int dev = 0;
        (void)api::cudaGetDevice(&dev);
        fail<OutOfMemoryError>("out of memory: tried to allocate ", bytes, " bytes on device ", dev, " (", free_b,
                               " bytes free of ", total_b, " total). Free tensors you no longer need or use smaller sizes.");
    }
    check(e, "cudaMalloc");
    return p;
}
inline void free_device(void* p) { TESSEL_CUDA_CHECK(api::cudaFree(p)); }

// Device memory from the runtime, or nullptr when it has none left (the caching allocator then
// frees its cache and retries). Other failures still throw.
inline void* try_malloc_device(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = api::cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)api::cudaGetLastError();
        return nullptr;
    }
    check(e, "cudaMalloc");
    return p;
}

// Page-locked host memory; OutOfMemoryError (as for device memory) when the system has none to give.
inline void* malloc_pinned(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = api::cudaMallocHost(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)api::cudaGetLastError();
        fail<OutOfMemoryError>("out of pinned host memory: tried to allocate ", bytes,
                               " bytes of page-locked memory. Free pinned tensors you no longer need, call "
                               "tessel::memory::empty_host_cache(), or use pageable host memory for large buffers.");
    }
    check(e, "cudaMallocHost");
    return p;
}
inline void free_pinned(void* p) { TESSEL_CUDA_CHECK(api::cudaFreeHost(p)); }

// Unified (managed) memory, addressable from host and device; migrated on demand or by prefetch.
inline void* malloc_managed(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = api::cudaMallocManaged(&p, bytes, cudaMemAttachGlobal);
    if (e == cudaErrorMemoryAllocation) {
        (void)api::cudaGetLastError();
        int dev = 0;
        (void)api::cudaGetDevice(&dev);
        fail<OutOfMemoryError>("out of managed memory: tried to allocate ", bytes, " bytes of unified memory for device ", dev,
                               ". Free tensors you no longer need or use smaller sizes.");
    }
    check(e, "cudaMallocManaged");
    return p;
}
// Where managed memory should move to: a device ordinal, or the host (-1).
inline cudaMemLocation memory_location(int device) {
    cudaMemLocation l{};
    l.type = device < 0 ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
    l.id = device < 0 ? 0 : device;
    return l;
}
inline void prefetch_async(const void* p, std::size_t bytes, int device, stream_t stream) {
    TESSEL_CUDA_CHECK(api::cudaMemPrefetchAsync(p, bytes, memory_location(device), 0, stream));
}
inline void mem_advise(const void* p, std::size_t bytes, cudaMemoryAdvise advice, int device) {
    TESSEL_CUDA_CHECK(api::cudaMemAdvise(p, bytes, advice, memory_location(device)));
}

// Copies `bytes` between any two memory spaces (the runtime infers the direction), ordered on `stream`.
inline void memcpy_async(void* dst, const void* src, std::size_t bytes, stream_t stream) {
    TESSEL_CUDA_CHECK(api::cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}
// Copies and waits for the copy (and everything before it on the default stream).
inline void memcpy(void* dst, const void* src, std::size_t bytes) {
    TESSEL_CUDA_CHECK(api::cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}
inline void memset_async(void* dst, int byte, std::size_t bytes, stream_t stream) {
    TESSEL_CUDA_CHECK(api::cudaMemsetAsync(dst, byte, bytes, stream));
}

// Free and total memory of the current device, as the runtime reports them.
struct MemoryInfo {
    std::size_t free_bytes = 0, total_bytes = 0;
};
inline MemoryInfo memory_info() {
    MemoryInfo m;
    TESSEL_CUDA_CHECK(api::cudaMemGetInfo(&m.free_bytes, &m.total_bytes));
    return m;
}

inline stream_t stream_create(bool non_blocking = false, int priority = 0) {
    stream_t s = nullptr;
    TESSEL_CUDA_CHECK(api::cudaStreamCreateWithPriority(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
    return s;
}
inline void stream_destroy(stream_t s) { TESSEL_CUDA_CHECK(api::cudaStreamDestroy(s)); }
inline void stream_synchronize(stream_t s) { TESSEL_CUDA_CHECK(api::cudaStreamSynchronize(s)); }
// True when all work queued on `s` has finished; throws if that work failed.
inline bool stream_query(stream_t s) {
    const cudaError_t e = api::cudaStreamQuery(s);
    if (e == cudaErrorNotReady) {
        // NotReady is also the thread's last error: left there, the next launch's cudaGetLastError
        // would report it (as PyTorch, clear it).
        (void)api::cudaGetLastError();
        return false;
    }
    check(e, "cudaStreamQuery");
    return true;
}
// The device a stream belongs to (the current device for the default stream); throws CudaError
// for a handle that is not a live stream. Every check of a stream argument comes here, and refuses
// cudaStreamPerThread: that one handle names a different stream on each host thread, while the
// caching allocator and the tensors' last-write records order work by handle (a block freed by one
// thread's stream would be handed to another's at once).
inline int stream_device(stream_t s) {
    if (reinterpret_cast<std::uintptr_t>(s) == 0x2)  // cudaStreamPerThread (driver_types.h; the sim's is the same)
        fail<InvalidArgument>("cudaStreamPerThread names a different stream on each host thread; tessel orders memory reuse and "
                              "tensor accesses by stream handle and cannot take it: pass a Stream (Stream::create()) or a "
                              "stream handle of your own");
    int d = 0;
    TESSEL_CUDA_CHECK(api::cudaStreamGetDevice(s, &d));
    return d;
}
inline void stream_wait_event(stream_t s, event_t e) { TESSEL_CUDA_CHECK(api::cudaStreamWaitEvent(s, e, 0)); }

inline event_t event_create(bool timing = true) {
    event_t e = nullptr;
    TESSEL_CUDA_CHECK(api::cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    return e;
}
inline void event_destroy(event_t e) { TESSEL_CUDA_CHECK(api::cudaEventDestroy(e)); }
inline void event_record(event_t e, stream_t s) { TESSEL_CUDA_CHECK(api::cudaEventRecord(e, s)); }
inline void event_synchronize(event_t e) { TESSEL_CUDA_CHECK(api::cudaEventSynchronize(e)); }
inline bool event_query(event_t e) {
    const cudaError_t r = api::cudaEventQuery(e);
    if (r == cudaErrorNotReady) {
        (void)api::cudaGetLastError();  // as in stream_query
        return false;
    }
    check(r, "cudaEventQuery");
    return true;
}
// Milliseconds between two completed events.
inline float event_elapsed_ms(event_t start, event_t end) {
    float ms = 0;
    TESSEL_CUDA_CHECK(api::cudaEventElapsedTime(&ms, start, end));
    return ms;
}

inline void device_synchronize() { TESSEL_CUDA_CHECK(api::cudaDeviceSynchronize()); }

// Lets `kernel` use up to `bytes` of dynamic shared memory (needed above 48 KiB).
template <class... P>
void set_max_dynamic_smem(void (*kernel)(P...), int bytes) {
    TESSEL_CUDA_CHECK(api::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                                cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

}  // namespace tessel::rt
