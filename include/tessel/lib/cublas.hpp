// cuBLAS, one thin layer for both backends: the library on CUDA, its stand-in (sim/cublas.hpp, the
// same names and status codes) on the sim, so tessel's calls are written once and run in CI.
//  - check / TESSEL_CUBLAS_CHECK: a non-success status throws LibraryError naming it and the call;
//  - Handle: an owning handle bound to one stream (benchmarks);
//  - handle(device, stream): the calling thread's pooled handle for the device, set to `stream` and
//    to that (handle, stream)'s workspace from the caching allocator, on every use (PyTorch's
//    getCurrentCUDABlasHandle: cuBLAS would otherwise allocate its workspace outside the cache).
//  - release_workspaces(): gives back the workspaces of cuBLAS's handles and of cuBLASLt's
//    (lib/cublaslt.hpp keeps its own in the same table).
#pragma once

#include "../core/backend.hpp"

#if defined(TESSEL_BACKEND_CUDA)
#include <cublas_v2.h>
#else
#include "../sim/cublas.hpp"
#endif

#include <cstdlib>
#include <map>
#include <optional>
#include <mutex>
#include <source_location>
#include <utility>
#include <vector>

#include "../core/env.hpp"
#include "../core/error.hpp"
#include "../memory/allocator.hpp"
#include "../runtime/device.hpp"
#include "../runtime/rt.hpp"

namespace tessel::cublas {

#if defined(TESSEL_BACKEND_CUDA)
namespace api {
using ::cublasCreate_v2;
using ::cublasDestroy_v2;
using ::cublasGemmStridedBatchedEx;
using ::cublasGetStatusName;
using ::cublasGetMathMode;
using ::cublasSetMathMode;
using ::cublasSetStream_v2;
using ::cublasSetWorkspace_v2;
}  // namespace api
#else
namespace api = ::tessel::sim::cublas;
#endif

inline void check(cublasStatus_t status, const char* expression, std::source_location where = std::source_location::current()) {
    if (status != CUBLAS_STATUS_SUCCESS) throw LibraryError("cuBLAS", int(status), api::cublasGetStatusName(status), expression, where);
}

// An owning cuBLAS handle whose work goes to one stream.
class Handle {
public:
    explicit Handle(rt::stream_t stream = nullptr) {
        check(api::cublasCreate_v2(&h_), "cublasCreate");
        check(api::cublasSetStream_v2(h_, stream), "cublasSetStream");
    }
    ~Handle() { (void)api::cublasDestroy_v2(h_); }
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    cublasHandle_t get() const { return h_; }

private:
    cublasHandle_t h_ = nullptr;
};

// The workspace each (handle, stream) gets: TESSEL_CUBLAS_WORKSPACE (a size, e.g. 32MiB; 0 lets
// cuBLAS run without one), by default 32 MiB on sm_90 and later (PyTorch's Hopper default,
// CUBLAS_WORKSPACE_CONFIG=:4096:8) and 8 MiB before.
inline std::size_t workspace_bytes(Device device) {
    static const std::optional<std::size_t> configured = []() -> std::optional<std::size_t> {
        const char* v = std::getenv("TESSEL_CUBLAS_WORKSPACE");
        if (!v) return std::nullopt;
        return std::size_t(env::parse_bytes("TESSEL_CUBLAS_WORKSPACE", v, 0, std::uint64_t(1) << 32));
    }();
    if (configured) return *configured;
    int major = 0;
    rt::check(rt::api::cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device.index), "cudaDeviceGetAttribute");
    return major >= 9 ? (std::size_t(32) << 20) : (std::size_t(8) << 20);
}

namespace detail {
// Handles no thread holds, per device; and the workspace of each (handle, stream). Never destroyed:
// handles released at thread exit return here, and destroying handles during static destruction
// can outlive the CUDA context.
struct HandlePool {
    std::mutex m;
    std::map<int, std::vector<cublasHandle_t>> free;
    struct Workspace {
        void* data = nullptr;
        std::size_t bytes = 0;
    };
    // Keyed by the library handle that uses it: a cublasHandle_t, or a cublasLtHandle_t
    // (lib/cublaslt.hpp), so that release_workspaces() finds both libraries' workspaces.
    std::map<std::pair<const void*, rt::stream_t>, Workspace> workspaces;
    static HandlePool& get() {
        static HandlePool* p = new HandlePool();
        return *p;
    }
};

// The workspace of (owner, stream): sized and taken from the caching allocator on first use, then
// kept until release_workspaces().
inline HandlePool::Workspace workspace(const void* owner, Device device, rt::stream_t stream) {
    HandlePool& p = HandlePool::get();
    HandlePool::Workspace ws;
    {
        std::lock_guard lk(p.m);
        if (auto it = p.workspaces.find({owner, stream}); it != p.workspaces.end()) return it->second;
    }
    ws.bytes = workspace_bytes(device);
    ws.data = ws.bytes ? memory::allocate(ws.bytes, stream) : nullptr;
    std::lock_guard lk(p.m);
    p.workspaces[{owner, stream}] = ws;
    return ws;
}
// The calling thread's handles by device, given back to the pool when the thread exits.
struct ThreadHandles {
    std::map<int, cublasHandle_t> by_device;
    ~ThreadHandles() {
        HandlePool& p = HandlePool::get();
        std::lock_guard lk(p.m);
        for (auto& [d, h] : by_device) p.free[d].push_back(h);
    }
};
}  // namespace detail

// The calling thread's cuBLAS handle for `device`, its work set to go to `stream` with that
// stream's workspace. Call it for every cuBLAS call (the stream and workspace are set each time).
inline cublasHandle_t handle(Device device, rt::stream_t stream) {
    static thread_local detail::ThreadHandles mine;
    DeviceGuard guard(device);
    cublasHandle_t h = nullptr;
    if (auto it = mine.by_device.find(device.index); it != mine.by_device.end()) {
        h = it->second;
    } else {
        detail::HandlePool& p = detail::HandlePool::get();
        {
            std::lock_guard lk(p.m);
            auto& free = p.free[device.index];
            if (!free.empty()) h = free.back(), free.pop_back();
        }
        if (!h) {
            check(api::cublasCreate_v2(&h), "cublasCreate");
            // As with cuBLASLt: reductions in the compute type, never in a 16-bit output type (the
            // default allows it), so a 16-bit result is rounded once. TF32 is chosen per call.
            check(api::cublasSetMathMode(h, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                  "cublasSetMathMode");
        }
        mine.by_device[device.index] = h;
    }
    check(api::cublasSetStream_v2(h, stream), "cublasSetStream");
    const detail::HandlePool::Workspace ws = detail::workspace(h, device, stream);
    // cublasSetStream gave the handle back cuBLAS's own pool (its cudaMalloc, outside the caching
    // allocator): a configured size of 0 sets no workspace at all, not that pool.
    check(api::cublasSetWorkspace_v2(h, ws.data, ws.bytes), "cublasSetWorkspace");
    return h;
}

// Gives every (handle, stream) workspace, cuBLAS's and cuBLASLt's, back to the caching allocator
// (each is taken again, from the cache, by the next call on its stream): for tests that account for every allocated byte, and
// before empty_cache() when the memory is wanted elsewhere. Work already queued keeps its memory:
// the allocator reuses a block only in its stream's order.
inline void release_workspaces() {
    detail::HandlePool& p = detail::HandlePool::get();
    std::lock_guard lk(p.m);
    for (auto& [key, ws] : p.workspaces)
        if (ws.data) memory::deallocate(ws.data);
    p.workspaces.clear();
}

}  // namespace tessel::cublas

// Checks a cuBLAS call and throws tessel::LibraryError naming the status and the call.
#define TESSEL_CUBLAS_CHECK(expr) ::tessel::cublas::check((expr), #expr)
