// The simulated CUDA runtime: the subset of the CUDA runtime API that tessel::rt calls, with the
// same names, signatures and error codes, in namespace tessel::sim::api. Device memory is host
// memory counted against a configurable capacity; streams run asynchronously; kernels run through
// the block executors.
#pragma once

#include <cuda_runtime_api.h>  // declarations and types only: the sim never links the CUDA runtime

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "../core/linkage.hpp"
#include "block_exec.hpp"  // LaunchSpec
#include "qualifiers.hpp"

namespace tessel::sim::api {

// The CUDA runtime calls the sim provides, with the CUDA runtime's signatures and error codes.
TESSEL_API const char* cudaGetErrorName(cudaError_t e);
TESSEL_API const char* cudaGetErrorString(cudaError_t e);
TESSEL_API cudaError_t cudaGetLastError();
TESSEL_API cudaError_t cudaPeekAtLastError();
// The sim's explanation of the last error it returned on this thread (empty when it has none).
TESSEL_API const std::string& last_error_detail();
TESSEL_API cudaError_t cudaGetDeviceCount(int* n);
TESSEL_API cudaError_t cudaSetDevice(int d);
TESSEL_API cudaError_t cudaGetDevice(int* d);
TESSEL_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
TESSEL_API cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int d);
TESSEL_API cudaError_t cudaRuntimeGetVersion(int* v);
TESSEL_API cudaError_t cudaDriverGetVersion(int* v);
TESSEL_API cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total);
TESSEL_API cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest);
TESSEL_API cudaError_t cudaDeviceSynchronize();
TESSEL_API cudaError_t cudaMalloc(void** p, std::size_t n);
TESSEL_API cudaError_t cudaMallocManaged(void** p, std::size_t n, unsigned flags = cudaMemAttachGlobal);
TESSEL_API cudaError_t cudaMemPrefetchAsync(const void* p, std::size_t n, cudaMemLocation to, unsigned, cudaStream_t s = nullptr);
TESSEL_API cudaError_t cudaMemAdvise(const void* p, std::size_t n, cudaMemoryAdvise, cudaMemLocation);
TESSEL_API cudaError_t cudaFree(void* p);
TESSEL_API cudaError_t cudaMallocHost(void** p, std::size_t n);
TESSEL_API cudaError_t cudaHostAlloc(void** p, std::size_t n, unsigned);
TESSEL_API cudaError_t cudaFreeHost(void* p);
TESSEL_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p);
TESSEL_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind, cudaStream_t s = nullptr);
TESSEL_API cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind);
TESSEL_API cudaError_t cudaMemsetAsync(void* p, int value, std::size_t n, cudaStream_t s = nullptr);
TESSEL_API cudaError_t cudaMemset(void* p, int value, std::size_t n);
TESSEL_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority);
TESSEL_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
TESSEL_API cudaError_t cudaStreamCreate(cudaStream_t* s);
TESSEL_API cudaError_t cudaStreamDestroy(cudaStream_t s);
TESSEL_API cudaError_t cudaStreamSynchronize(cudaStream_t s);
TESSEL_API cudaError_t cudaStreamQuery(cudaStream_t s);
TESSEL_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device);
// Peer access: every pair of simulated devices can (their memory is the host's), unless TESSEL_SIM_PEER=0.
TESSEL_API cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer);
TESSEL_API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
TESSEL_API cudaError_t cudaDeviceDisablePeerAccess(int peer);
TESSEL_API cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, std::size_t n, cudaStream_t s = nullptr);
TESSEL_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int* prio);
TESSEL_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
TESSEL_API cudaError_t cudaEventCreate(cudaEvent_t* e);
TESSEL_API cudaError_t cudaEventDestroy(cudaEvent_t e);
TESSEL_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
TESSEL_API cudaError_t cudaEventQuery(cudaEvent_t e);
TESSEL_API cudaError_t cudaEventSynchronize(cudaEvent_t e);
TESSEL_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
TESSEL_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0);
TESSEL_API cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
TESSEL_API cudaError_t launch_kernel(const void* func, dim3 grid, dim3 block, std::size_t smem, cudaStream_t s, std::shared_ptr<LaunchSpec> call, dim3 cluster = dim3(1, 1, 1));
// Queues host work on stream s in stream order (a vendor-library stand-in's computation, like
// sim/cublas.hpp's GEMM); an exception it throws is the stream's next error, as a kernel fault is.
// `handle_device` >= 0: the work is the kernel launch of a library handle created on that device
// (cuBLAS, cuBLASLt), refused as CUDA refuses the launch unless that device is current and s is
// one of its streams (a null s is the current device's default stream).
TESSEL_API cudaError_t enqueue_host_work(cudaStream_t s, std::function<void()> work, std::string what, int handle_device = -1);
}  // namespace tessel::sim::api

namespace tessel::sim {
// How many kernels this process has launched on the sim so far (all devices and streams): lets a
// test observe that an operation is one launch.
TESSEL_API std::uint64_t launch_count();
// Of those, the launches in thread-block clusters of two or more blocks.
TESSEL_API std::uint64_t cluster_launch_count();
// The demangled name of the kernel launched last (such as "void tessel::kernels::evaluate_rows<4, ...>(...)"):
// lets a test observe which of an operation's kernels it chose.
TESSEL_API std::string last_kernel_name();
// cudaMemcpyPeerAsync calls so far that went device to device (peer access enabled), and those the
// driver would stage through host memory (not enabled): lets a test see which a copy took.
TESSEL_API std::uint64_t peer_copy_count();
TESSEL_API std::uint64_t staged_copy_count();
// ldmatrix's shared-memory reads under sm_80-sm_90's bank model: 32 banks of 4 bytes; the eight
// 16-byte rows of one 8x8 matrix are one request, served in as many wavefronts as the most distinct
// words any one bank holds among them (a word several rows read is broadcast). Lets a test see that a
// kernel's tiles are laid out (swizzled) so that every request takes one wavefront.
struct LdmatrixTraffic {
    std::uint64_t matrices = 0;    // 8x8 matrices read, all devices
    std::uint64_t wavefronts = 0;  // the wavefronts they took: equal to `matrices` when no read had a bank conflict
};
TESSEL_API LdmatrixTraffic ldmatrix_traffic();
TESSEL_API void count_ldmatrix(std::uint64_t matrices, std::uint64_t wavefronts);  // sim/warp_matrix.hpp's ldmatrix
// Whether the program has made `device`'s primary context yet (on a GPU each costs hundreds of MiB
// of that device's memory): lets a test check that work on one device leaves the others untouched.
// Setting the device, allocating on it, creating a stream or event there and launching make it.
TESSEL_API bool context_created(int device);
}  // namespace tessel::sim

#if TESSEL_DEFINE_RUNTIME
#include "runtime_state.hpp"

namespace tessel::sim {
TESSEL_API Runtime& Runtime::get() {
    static Runtime* r = new Runtime();
    return *r;
}
}  // namespace tessel::sim

namespace tessel::sim::api {

namespace detail {
// Queues work on a stream with the legacy default stream's implicit ordering: work on the default
// stream waits for every blocking stream of its device, and work on a blocking stream waits for it.
TESSEL_API std::uint64_t enqueue(CUstream_st* s, std::function<void()> task, bool busy) {
    // shared_ptr: a waited-for stream may be destroyed before the wait runs.
    std::vector<std::pair<std::shared_ptr<CUstream_st>, std::uint64_t>> waits;
    {
        std::lock_guard lk(rt().m);
        SimDevice& d = rt().devices[std::size_t(s->device)];
        if (s->is_null) {
            for (auto& b : d.blocking_streams) waits.emplace_back(b, b->tail());
        } else if (s->flags == cudaStreamDefault) {
            waits.emplace_back(d.null_stream, d.null_stream->tail());
        }
    }
    std::erase_if(waits, [](auto& w) { return w.first->reached(w.second); });
    if (!waits.empty())
        s->push([waits] {
            for (auto& [stream, seq] : waits) stream->wait_for(seq);
        });
    return s->push(std::move(task), busy);
}

inline cudaError_t report(CUstream_st* s) {
    std::string detail;
    cudaError_t e = s->take_error(detail);
    if (e != cudaSuccess) return fail(e, std::move(detail));
    return ok();
}

inline cudaError_t check_device_range(const void* p, std::size_t n, const char* what) {
    std::lock_guard lk(rt().m);
    const Allocation* a = rt().find(p, n);
    if (!a || a->device < 0)
        return fail(cudaErrorInvalidValue, std::string(what) + " " + hex_ptr(p) + " (+" + std::to_string(n) +
                                               " bytes) is not inside a live device allocation");
    return cudaSuccess;
}

inline bool is_pinned(const void* p) {
    std::lock_guard lk(rt().m);
    const Allocation* a = rt().find(p, 1);
    return a && a->device < 0;
}

inline bool is_device_pointer(const void* p) {
    std::lock_guard lk(rt().m);
    const Allocation* a = rt().find(p, 1);
    return a && a->device >= 0;
}

// Why `launch`, run by `device`, may not read one of its pointer arguments (another device's memory
// without peer access, or another device's pool memory without pool access); empty if it may.
// Defined with the pools (mempool.hpp).
std::string inaccessible_argument(const LaunchSpec& launch, int device);
}  // namespace detail

// ---- errors -------------------------------------------------------------------------------------
TESSEL_API const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
        case cudaErrorNotSupported: return "cudaErrorNotSupported";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        default: return "cudaErrorUnknown";
    }
}
TESSEL_API const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDeviceFunction: return "invalid device function";
        case cudaErrorNotSupported: return "operation not supported";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        default: return "unknown error";
    }
}
TESSEL_API cudaError_t cudaGetLastError() {
    cudaError_t e = detail::last_error;
    detail::last_error = cudaSuccess;
    return e;
}
TESSEL_API cudaError_t cudaPeekAtLastError() { return detail::last_error; }
TESSEL_API const std::string& last_error_detail() { return detail::last_detail; }

// ---- devices ------------------------------------------------------------------------------------
TESSEL_API cudaError_t cudaGetDeviceCount(int* n) {
    *n = 0;
    // What a fresh process sees on a node whose only GPU fell off the bus, or whose driver cannot
    // run: CUDA finds nothing while NVML still lists the GPUs (TESSEL_SIM_CUDA_UNAVAILABLE).
    if (config().cuda_unavailable) return detail::fail(cudaErrorNoDevice, "the sim hides its devices from CUDA (TESSEL_SIM_CUDA_UNAVAILABLE=1)");
    *n = int(detail::rt().devices.size());
    return detail::ok();
}
TESSEL_API cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= int(detail::rt().devices.size()))
        return detail::fail(cudaErrorInvalidDevice, "device " + std::to_string(d) + " does not exist; the sim has " +
                                                        std::to_string(detail::rt().devices.size()) +
                                                        " device(s) (set TESSEL_SIM_DEVICES for more)");
    detail::current_device = d;
    detail::use_context();  // as CUDA 12 and later: cudaSetDevice initialises the device's primary context
    return detail::ok();
}
TESSEL_API cudaError_t cudaGetDevice(int* d) {
    *d = detail::current_device;
    return detail::ok();
}
TESSEL_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d < 0 || d >= int(detail::rt().devices.size())) return detail::fail(cudaErrorInvalidDevice, "no such device");
    *p = detail::rt().devices[std::size_t(d)].prop;
    return detail::ok();
}
TESSEL_API cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int d) {
    if (d < 0 || d >= int(detail::rt().devices.size())) return detail::fail(cudaErrorInvalidDevice, "no such device");
    const cudaDeviceProp& p = detail::rt().devices[std::size_t(d)].prop;
    switch (attr) {
        case cudaDevAttrClockRate: *v = 2000000; return detail::ok();        // kHz, nominal
        case cudaDevAttrMemoryClockRate: *v = 3200000; return detail::ok();  // kHz, nominal
        case cudaDevAttrGlobalMemoryBusWidth: *v = p.memoryBusWidth; return detail::ok();
        case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; return detail::ok();
        case cudaDevAttrComputeCapabilityMajor: *v = p.major; return detail::ok();
        case cudaDevAttrComputeCapabilityMinor: *v = p.minor; return detail::ok();
        case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; return detail::ok();
        case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; return detail::ok();
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = int(p.sharedMemPerBlock); return detail::ok();
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = int(p.sharedMemPerBlockOptin); return detail::ok();
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = int(p.sharedMemPerMultiprocessor); return detail::ok();
        case cudaDevAttrWarpSize: *v = 32; return detail::ok();
        default: return detail::fail(cudaErrorInvalidValue, "the sim does not model device attribute " + std::to_string(int(attr)));
    }
}
TESSEL_API cudaError_t cudaRuntimeGetVersion(int* v) {
    *v = CUDART_VERSION;
    return detail::ok();
}
TESSEL_API cudaError_t cudaDriverGetVersion(int* v) {
    *v = CUDART_VERSION;
    return detail::ok();
}
TESSEL_API cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total) {
    detail::use_context();
    std::lock_guard lk(detail::rt().m);
    const SimDevice& d = detail::rt().devices[std::size_t(detail::current_device)];
    *total = d.capacity;
    *free_bytes = d.capacity - d.used;
    return detail::ok();
}
TESSEL_API cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    *least = 0;
    *greatest = -5;
    return detail::ok();
}
TESSEL_API cudaError_t cudaDeviceSynchronize() {
    detail::use_context();
    const int dev = detail::current_device;
    std::vector<std::shared_ptr<CUstream_st>> all;
    {
        std::lock_guard lk(detail::rt().m);
        all.push_back(detail::rt().devices[std::size_t(dev)].null_stream);
        for (auto& [k, s] : detail::rt().streams)
            if (s->device == dev) all.push_back(s);
    }
    for (auto& s : all) s->wait_for(s->tail());
    for (auto& s : all)
        if (cudaError_t e = detail::report(s.get()); e != cudaSuccess) return e;
    return detail::ok();
}

// ---- streams ------------------------------------------------------------------------------------
TESSEL_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority) {
    detail::use_context();
    if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking)
        return detail::fail(cudaErrorInvalidValue, "stream flags " + std::to_string(flags) + " are neither cudaStreamDefault nor cudaStreamNonBlocking");
    auto stream = std::make_shared<CUstream_st>(detail::current_device, flags, std::clamp(priority, -5, 0), false);
    std::lock_guard lk(detail::rt().m);
    detail::rt().streams[stream.get()] = stream;
    if (flags == cudaStreamDefault) detail::rt().devices[std::size_t(detail::current_device)].blocking_streams.push_back(stream);
    *s = stream.get();
    return detail::ok();
}
TESSEL_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) { return ::tessel::sim::api::cudaStreamCreateWithPriority(s, flags, 0); }
TESSEL_API cudaError_t cudaStreamCreate(cudaStream_t* s) { return ::tessel::sim::api::cudaStreamCreateWithPriority(s, cudaStreamDefault, 0); }
TESSEL_API cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::shared_ptr<CUstream_st> keep;
    {
        std::lock_guard lk(detail::rt().m);
        auto it = detail::rt().streams.find(s);
        if (it == detail::rt().streams.end())
            return detail::fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(" + hex_ptr(s) + "): not a live stream");
        keep = it->second;
        detail::rt().streams.erase(it);
        std::erase(detail::rt().devices[std::size_t(keep->device)].blocking_streams, keep);
    }
    // As in CUDA, queued work still completes; here the destroying thread waits for it.
    keep->wait_for(keep->tail());
    return detail::ok();
}
TESSEL_API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    CUstream_st* st = detail::resolve(s);
    st->wait_for(st->tail());
    return detail::report(st);
}
TESSEL_API cudaError_t cudaStreamQuery(cudaStream_t s) {
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    CUstream_st* st = detail::resolve(s);
    // As CUDA's, NotReady is also the thread's last error (the next cudaGetLastError returns it).
    if (!st->reached(st->tail())) return detail::fail(cudaErrorNotReady, "work queued on stream " + hex_ptr(s) + " has not finished");
    return detail::report(st);
}
TESSEL_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device) {
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    *device = detail::resolve(s)->device;
    return detail::ok();
}
TESSEL_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int* prio) {
    *prio = detail::resolve(s)->priority;
    return detail::ok();
}

// ---- events -------------------------------------------------------------------------------------
TESSEL_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    detail::use_context();
    *e = new CUevent_st{};
    (*e)->flags = flags;
    (*e)->device = detail::current_device;
    return detail::ok();
}
TESSEL_API cudaError_t cudaEventCreate(cudaEvent_t* e) { return ::tessel::sim::api::cudaEventCreateWithFlags(e, cudaEventDefault); }
TESSEL_API cudaError_t cudaEventDestroy(cudaEvent_t e) {
    if (!e) return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy(nullptr)");
    e->wait();  // a pending record still writes the event; CUDA defers the release, the sim waits
    delete e;
    return detail::ok();
}
TESSEL_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e) return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventRecord on a null event");
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    CUstream_st* st = detail::resolve(s);
    if (st->device != e->device)
        return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: the event belongs to device " +
                                                                std::to_string(e->device) + " but the stream to device " +
                                                                std::to_string(st->device));
    std::shared_ptr<CUstream_st> owner;
    {
        std::lock_guard lk(detail::rt().m);
        if (st->is_null) owner = detail::rt().devices[std::size_t(st->device)].null_stream;
        else owner = detail::rt().streams.at(st);
    }
    std::lock_guard lk(e->m);
    const std::uint64_t id = ++e->record_id;
    e->stream = owner;
    e->seq = detail::enqueue(st, [e, id] {
        std::lock_guard l(e->m);
        if (e->record_id == id) e->time = std::chrono::steady_clock::now();
    });
    return detail::ok();
}
TESSEL_API cudaError_t cudaEventQuery(cudaEvent_t e) {
    if (!e) return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventQuery on a null event");
    std::lock_guard lk(e->m);
    if (!e->stream || e->stream->reached(e->seq)) return detail::ok();
    return detail::fail(cudaErrorNotReady, "the work before event " + hex_ptr(e) + " has not finished");  // the last error too, as CUDA's
}
TESSEL_API cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize on a null event");
    e->wait();
    return detail::ok();
}
TESSEL_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    if (!start || !end || !ms) return detail::fail(cudaErrorInvalidValue, "cudaEventElapsedTime with a null event or result");
    if ((start->flags & cudaEventDisableTiming) || (end->flags & cudaEventDisableTiming))
        return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime on an event created with cudaEventDisableTiming");
    for (cudaEvent_t e : {start, end}) {
        std::lock_guard lk(e->m);
        if (!e->stream) return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime on an event never recorded");
        if (!e->stream->reached(e->seq)) return detail::fail(cudaErrorNotReady, "an event has not completed yet");
    }
    if (start->device != end->device)
        return detail::fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime between events of devices " + std::to_string(start->device) +
                                                                " and " + std::to_string(end->device));
    if (start == end) return *ms = 0.0f, detail::ok();  // one mutex: scoped_lock would take it twice
    std::scoped_lock lk(start->m, end->m);
    *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
    return detail::ok();
}
TESSEL_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    if (!e) return detail::fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent on a null event");
    auto [src, seq] = e->position();
    if (src && !src->reached(seq)) detail::enqueue(detail::resolve(s), [src, seq] { src->wait_for(seq); });
    return detail::ok();
}

// ---- kernels ------------------------------------------------------------------------------------
TESSEL_API cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return detail::ok();  // others have no effect in the sim
    const cudaDeviceProp& p = detail::rt().devices[std::size_t(detail::current_device)].prop;
    if (value < 0) return detail::fail(cudaErrorInvalidValue, "cudaFuncAttributeMaxDynamicSharedMemorySize " + std::to_string(value) + " is negative");
    if (std::size_t(value) > p.sharedMemPerBlockOptin)
        return detail::fail(cudaErrorInvalidValue, "cudaFuncAttributeMaxDynamicSharedMemorySize " + std::to_string(value) +
                                                       " exceeds the device's opt-in maximum of " +
                                                       std::to_string(p.sharedMemPerBlockOptin) + " bytes");
    std::lock_guard lk(detail::rt().m);
    detail::rt().max_dynamic_smem[{func, detail::current_device}] = value;
    return detail::ok();
}

// Validates a launch as the CUDA runtime would and queues it on the stream. `call` owns the
// kernel's arguments and stays alive until the grid has run.
TESSEL_API cudaError_t launch_kernel(const void* func, dim3 grid, dim3 block, std::size_t smem, cudaStream_t s,
                                 std::shared_ptr<LaunchSpec> call, dim3 cluster) {
    auto bad = [&](const std::string& why) { return detail::fail(cudaErrorInvalidConfiguration, why); };
    const cudaDeviceProp& p = detail::rt().devices[std::size_t(detail::current_device)].prop;
    auto dims = [](dim3 d) {
        return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
    };
    if (block.x == 0 || block.y == 0 || block.z == 0) return bad("block dimensions " + dims(block) + " contain a zero");
    if (grid.x == 0 || grid.y == 0 || grid.z == 0) return bad("grid dimensions " + dims(grid) + " contain a zero");
    if (std::uint64_t(block.x) * block.y * block.z > std::uint64_t(p.maxThreadsPerBlock))
        return bad("block " + dims(block) + " has " + std::to_string(std::uint64_t(block.x) * block.y * block.z) +
                   " threads; at most " + std::to_string(p.maxThreadsPerBlock) + " are allowed");
    if (int(block.x) > p.maxThreadsDim[0] || int(block.y) > p.maxThreadsDim[1] || int(block.z) > p.maxThreadsDim[2])
        return bad("block " + dims(block) + " exceeds the per-dimension limits (1024,1024,64)");
    if (grid.x > unsigned(p.maxGridSize[0]) || grid.y > unsigned(p.maxGridSize[1]) || grid.z > unsigned(p.maxGridSize[2]))
        return bad("grid " + dims(grid) + " exceeds the limits (2147483647,65535,65535)");
    std::size_t limit = p.sharedMemPerBlock;
    {
        std::lock_guard lk(detail::rt().m);
        if (auto it = detail::rt().max_dynamic_smem.find({func, detail::current_device}); it != detail::rt().max_dynamic_smem.end())
            limit = std::size_t(it->second);
    }
    if (smem > limit)
        return detail::fail(cudaErrorInvalidValue,
                            std::to_string(smem) + " bytes of dynamic shared memory requested; the limit for this kernel is " +
                                std::to_string(limit) + " bytes (raise it with tessel::rt::set_max_dynamic_smem(kernel, bytes), "
                                "i.e. cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), up to " +
                                std::to_string(p.sharedMemPerBlockOptin) + ")");
    if (cluster.x == 0 || cluster.y == 0 || cluster.z == 0) return bad("cluster dimensions " + dims(cluster) + " contain a zero");
    if (grid.x % cluster.x || grid.y % cluster.y || grid.z % cluster.z)
        return bad("grid " + dims(grid) + " is not a whole number of clusters " + dims(cluster));
    if (std::uint64_t(cluster.x) * cluster.y * cluster.z > 8)
        return bad("cluster " + dims(cluster) + " has " + std::to_string(std::uint64_t(cluster.x) * cluster.y * cluster.z) +
                   " blocks; at most 8 are portable");
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    // CUDA fails a launch into a stream of another device than the current one (copies and event
    // waits may cross devices; launches may not).
    if (const int owner = detail::resolve(s)->device; owner != detail::current_device)
        return detail::fail(cudaErrorInvalidResourceHandle, "kernel launch into stream " + hex_ptr(s) + " of device " + std::to_string(owner) +
                                                                " while device " + std::to_string(detail::current_device) +
                                                                " is current (a launch needs its stream's device current)");
    detail::use_context();
    call->grid = grid;
    call->cluster = cluster;
    call->block = block;
    call->dynamic_smem = smem;
    call->kernel_name = &kernel_name(func);
    detail::rt().launches.fetch_add(1, std::memory_order_relaxed);
    {
        std::lock_guard lock(detail::rt().last_kernel_m);
        detail::rt().last_kernel = call->kernel_name;
    }
    if (std::uint64_t(cluster.x) * cluster.y * cluster.z > 1) detail::rt().cluster_launches.fetch_add(1, std::memory_order_relaxed);
    CUstream_st* st = detail::resolve(s);
    detail::enqueue(st, [call, st] {
        // As the GPU's MMU faults (XID 31) on an address the device has no mapping for.
        if (std::string why = detail::inaccessible_argument(*call, st->device); !why.empty())
            return st->fail(cudaErrorIllegalAddress, "kernel " + *call->kernel_name + ": " + why +
                                                         (call->launch_file ? std::string(" (launched at ") + call->launch_file + ":" +
                                                                                  std::to_string(call->launch_line) + ")"
                                                                            : std::string()));
        try {
            WorkerPool::instance().run_grid(*call);
        } catch (const std::exception& e) {
            st->fail(cudaErrorLaunchFailure, std::string(e.what()) + (call->launch_file ? std::string(" (launched at ") + call->launch_file + ":" +
                                                                                       std::to_string(call->launch_line) + ")"
                                                                                 : std::string()));
        } catch (...) {
            st->fail(cudaErrorLaunchFailure, "sim: kernel " + *call->kernel_name + " failed with an unknown exception");
        }
    }, true);
    return detail::ok();
}

TESSEL_API cudaError_t enqueue_host_work(cudaStream_t s, std::function<void()> work, std::string what, int handle_device) {
    if (!detail::valid_stream(s)) return detail::fail(cudaErrorInvalidResourceHandle, "stream " + hex_ptr(s) + " is not a live stream");
    CUstream_st* st = detail::resolve(s);
    if (handle_device >= 0 && (handle_device != detail::current_device || st->device != detail::current_device))
        return detail::fail(cudaErrorInvalidResourceHandle, what + ": a handle of device " + std::to_string(handle_device) +
                                                                " launching into stream " + hex_ptr(s) + " of device " + std::to_string(st->device) +
                                                                " while device " + std::to_string(detail::current_device) +
                                                                " is current (the library runs on the current device)");
    detail::enqueue(st, [work = std::move(work), what = std::move(what), st] {
        try {
            work();
        } catch (const std::exception& e) {
            st->fail(cudaErrorLaunchFailure, what + ": " + e.what());
        }
    }, true);
    return detail::ok();
}

}  // namespace tessel::sim::api

namespace tessel::sim {
TESSEL_API bool context_created(int device) {
    return device >= 0 && std::size_t(device) < Runtime::get().devices.size() &&
           Runtime::get().contexts[std::size_t(device)].load(std::memory_order_relaxed);
}
TESSEL_API std::uint64_t launch_count() { return Runtime::get().launches.load(std::memory_order_relaxed); }
TESSEL_API std::uint64_t peer_copy_count() { return Runtime::get().peer_copies.load(std::memory_order_relaxed); }
TESSEL_API std::uint64_t staged_copy_count() { return Runtime::get().staged_copies.load(std::memory_order_relaxed); }
TESSEL_API std::uint64_t cluster_launch_count() { return Runtime::get().cluster_launches.load(std::memory_order_relaxed); }
TESSEL_API LdmatrixTraffic ldmatrix_traffic() {
    return {Runtime::get().ldmatrix_matrices.load(std::memory_order_relaxed),
            Runtime::get().ldmatrix_wavefronts.load(std::memory_order_relaxed)};
}
TESSEL_API void count_ldmatrix(std::uint64_t matrices, std::uint64_t wavefronts) {
    Runtime::get().ldmatrix_matrices.fetch_add(matrices, std::memory_order_relaxed);
    Runtime::get().ldmatrix_wavefronts.fetch_add(wavefronts, std::memory_order_relaxed);
}
TESSEL_API std::string last_kernel_name() {
    std::lock_guard lock(Runtime::get().last_kernel_m);
    return Runtime::get().last_kernel ? *Runtime::get().last_kernel : std::string();
}
}  // namespace tessel::sim
#endif  // TESSEL_DEFINE_RUNTIME

#include "memory.hpp"
#include "mempool.hpp"
