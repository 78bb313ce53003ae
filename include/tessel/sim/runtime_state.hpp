// The simulated runtime's state: its devices, allocations, streams and error slots, and the helpers
// its definitions share (sim/runtime.hpp's definitions, the stream-ordered pools of mempool.hpp, the
// allocators' AddressSanitizer shadow queue). Kernels and tessel's other headers never need it,
// so it is not part of what sim/runtime.hpp declares for every file.
#pragma once

#include <cuda_runtime_api.h>  // declarations and types only: the sim never links the CUDA runtime
#include <cxxabi.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "../core/linkage.hpp"
#include "config.hpp"
#include "grid.hpp"
#include "stream.hpp"

namespace tessel::sim {

// A live allocation of simulated device memory or pinned host memory.
struct Allocation {
    std::size_t size = 0;
    int device = -1;       // -1: pinned host memory
    bool managed = false;  // cudaMallocManaged: counted on its device, addressable everywhere
    cudaMemPool_t pool = nullptr;  // the memory pool it was made for (cudaMallocFromPoolAsync): its access rules apply
};

// One simulated device: its properties, the memory in use, its default stream and its streams.
struct SimDevice {
    cudaDeviceProp prop{};
    std::size_t capacity = 0, used = 0;
    std::shared_ptr<CUstream_st> null_stream;
    std::vector<std::shared_ptr<CUstream_st>> blocking_streams;  // synchronise with the legacy default stream
};

inline std::string hex_ptr(const void* p) {
    std::ostringstream os;
    os << p;
    return os.str();
}

// Readable name of a kernel from its address (needs -rdynamic, which tessel::sim adds).
inline std::string demangled_symbol(const void* fn) {
    Dl_info info{};
    if (dladdr(fn, &info) && info.dli_sname) {
        int status = 0;
        char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
        std::string s = status == 0 && d ? d : info.dli_sname;
        std::free(d);
        return s;
    }
    return "kernel@" + hex_ptr(fn);
}

// The same, looked up once per kernel: dladdr and demangling a template's name took most of a
// launch's host time (10 of 16 us per matmul call on the sim).
inline const std::string& kernel_name(const void* fn) {
    static std::mutex m;
    static auto* names = new std::unordered_map<const void*, std::string>;  // never destroyed: launches may run at exit
    {
        std::lock_guard lk(m);
        if (auto it = names->find(fn); it != names->end()) return it->second;
    }
    std::string name = demangled_symbol(fn);  // outside the lock; if it throws, nothing is cached
    std::lock_guard lk(m);
    return names->try_emplace(fn, std::move(name)).first->second;  // references stay valid across inserts
}

// All state of the simulated runtime. Never destroyed: work still queued at exit stays valid.
class Runtime {
public:
    static Runtime& get();

    std::mutex m;
    std::vector<SimDevice> devices;
    std::map<std::uintptr_t, Allocation> allocations;  // by start address
    std::unordered_map<const CUstream_st*, std::shared_ptr<CUstream_st>> streams;
    // cudaFuncSetAttribute, by (kernel, device): as in CUDA, the attribute is set in the current
    // device's context and does not carry to another device.
    std::map<std::pair<const void*, int>, int> max_dynamic_smem;
    std::atomic<std::uint64_t> launches{0};                 // kernels accepted by launch_kernel, all devices
    std::atomic<std::uint64_t> cluster_launches{0};         // of which launched in clusters of 2 or more blocks
    std::mutex last_kernel_m;
    const std::string* last_kernel = nullptr;  // the last kernel accepted, demangled (tests check which path ran)
    std::set<std::pair<int, int>> peer_enabled;             // (device, peer): device may access peer's memory
    std::atomic<std::uint64_t> peer_copies{0}, staged_copies{0};  // cudaMemcpyPeerAsync, direct or through the host
    std::atomic<std::uint64_t> ldmatrix_matrices{0}, ldmatrix_wavefronts{0};  // sim::ldmatrix_traffic()
    // Per device, whether its primary context exists: made by the first call that needs it (setting
    // the device, allocating, creating a stream or event, launching), as on a GPU, where each one
    // costs hundreds of MiB of device memory and startup time. Lets tests see which devices a
    // program touched (sim::context_created).
    std::unique_ptr<std::atomic<bool>[]> contexts;

    // The allocation containing [p, p+n), or nullptr. Caller holds m.
    const Allocation* find(const void* p, std::size_t n) const {
        const auto a = reinterpret_cast<std::uintptr_t>(p);
        auto it = allocations.upper_bound(a);
        if (it == allocations.begin()) return nullptr;
        --it;
        if (a + n > it->first + it->second.size || (n == 0 && a >= it->first + it->second.size)) return nullptr;
        return &it->second;
    }

private:
    Runtime() {
        const Config& c = config();
        devices.resize(std::size_t(c.devices));
        contexts = std::make_unique<std::atomic<bool>[]>(std::size_t(c.devices));
        for (int i = 0; i < c.devices; ++i) {
            SimDevice& d = devices[std::size_t(i)];
            d.capacity = c.memory_bytes;
            fill_properties(d.prop, i, c);
            d.null_stream = std::make_shared<CUstream_st>(i, cudaStreamDefault, 0, true);
        }
    }

    static void fill_properties(cudaDeviceProp& p, int index, const Config& c) {
        std::snprintf(p.name, sizeof p.name, "tessel sim device %d (CPU, %d workers)", index, c.workers);
        p.totalGlobalMem = c.memory_bytes;
        p.sharedMemPerBlock = 48 * 1024;
        p.sharedMemPerBlockOptin = 227 * 1024;
        p.sharedMemPerMultiprocessor = 228 * 1024;
        p.reservedSharedMemPerBlock = 1024;
        p.regsPerBlock = 65536;
        p.regsPerMultiprocessor = 65536;
        p.warpSize = 32;
        p.maxThreadsPerBlock = 1024;
        p.maxThreadsDim[0] = 1024;
        p.maxThreadsDim[1] = 1024;
        p.maxThreadsDim[2] = 64;
        p.maxGridSize[0] = 0x7fffffff;
        p.maxGridSize[1] = 65535;
        p.maxGridSize[2] = 65535;
        p.totalConstMem = 64 * 1024;
        p.major = 9;
        p.minor = 0;
        p.multiProcessorCount = c.workers;
        p.maxThreadsPerMultiProcessor = 2048;
        p.maxBlocksPerMultiProcessor = 32;
        const long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
        p.l2CacheSize = l2 > 0 ? int(l2) : 1 << 20;
        p.memoryBusWidth = 64;  // nominal: one DDR channel
        p.concurrentKernels = 1;
        p.asyncEngineCount = 1;
        p.unifiedAddressing = 1;
        p.managedMemory = 1;
        p.streamPrioritiesSupported = 1;
        p.canMapHostMemory = 1;
        p.pciBusID = index;
        p.integrated = 1;
    }
};

}  // namespace tessel::sim

namespace tessel::sim::api {

namespace detail {
inline thread_local int current_device = 0;
inline thread_local cudaError_t last_error = cudaSuccess;
inline thread_local std::string last_detail;

inline cudaError_t fail(cudaError_t e, std::string detail) {
    last_error = e;
    last_detail = std::move(detail);
    return e;
}
inline cudaError_t ok() {
    last_detail.clear();
    return cudaSuccess;
}
inline Runtime& rt() { return Runtime::get(); }
// Marks a device's primary context as made (Runtime::contexts).
inline void use_context(int device = current_device) {
    rt().contexts[std::size_t(device)].store(true, std::memory_order_relaxed);
}

// The stream a handle names: nullptr / cudaStreamLegacy / cudaStreamPerThread mean the current
// device's default stream (the sim treats per-thread default streams as the legacy one).
inline CUstream_st* resolve(cudaStream_t s) {
    const auto v = reinterpret_cast<std::uintptr_t>(s);
    if (v == 0 || v == 1 || v == 2) return rt().devices[std::size_t(current_device)].null_stream.get();
    return s;
}

inline bool valid_stream(cudaStream_t s) {
    const auto v = reinterpret_cast<std::uintptr_t>(s);
    if (v <= 2) return true;
    std::lock_guard lk(rt().m);
    return rt().streams.count(s) != 0;
}

// Queues work on a stream with the legacy default stream's implicit ordering (see its definition);
// busy: device work, which the sim's NVML counts as utilisation.
TESSEL_API std::uint64_t enqueue(CUstream_st* s, std::function<void()> task, bool busy = false);
}  // namespace detail
}  // namespace tessel::sim::api
