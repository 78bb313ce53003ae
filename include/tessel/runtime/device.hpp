// The public device API: how many devices, which one is current on this host thread, what each
// is (DeviceProperties), and whether the driver can run this runtime (versions()).
//
// CUDA_VISIBLE_DEVICES (CUDA backend): the runtime sees only the listed devices, renumbered from 0 in
// the order listed, so Device{0} is the first visible one. An empty or invalid list means no
// device: device_count() returns 0 and unavailable_reason() says why. The sim ignores it and
// simulates TESSEL_SIM_DEVICES devices instead.
#pragma once

#include <cstddef>
#include <string>

#include "rt.hpp"

namespace tessel {

// A device by runtime ordinal (after CUDA_VISIBLE_DEVICES renumbering).
struct Device {
    int index = 0;
    friend bool operator==(Device, Device) = default;
};

// What a device is, read from the runtime once per call of properties().
struct DeviceProperties {
    int index = 0;
    std::string name;
    int major = 0, minor = 0;           // compute capability
    int sm_count = 0;
    std::size_t total_memory = 0;       // bytes
    std::size_t free_memory = 0;        // bytes, at the time of the call
    int l2_cache_bytes = 0;
    std::size_t shared_memory_per_block = 0;        // without opt-in
    std::size_t shared_memory_per_block_optin = 0;  // after cudaFuncSetAttribute
    std::size_t shared_memory_per_sm = 0;
    int max_threads_per_block = 0;
    int warp_size = 0;
    int clock_khz = 0;         // peak SM clock
    int memory_clock_khz = 0;  // peak memory clock
    int memory_bus_bits = 0;
    bool simulated = false;

    // Peak DRAM bandwidth from clock and bus width (double data rate), in GB/s (1e9 bytes).
    double theoretical_bandwidth_gbs() const {
        return 2.0 * double(memory_clock_khz) * 1e3 * double(memory_bus_bits) / 8.0 / 1e9;
    }
    std::string compute_capability() const { return std::to_string(major) + "." + std::to_string(minor); }
};

namespace detail {
struct Availability {
    int count = 0;
    std::string reason;        // empty when count > 0
    bool bad_setting = false;  // a TESSEL_* variable was malformed: reason is its InvalidArgument message
};
inline const Availability& availability() {
    static const Availability a = [] {
        Availability r;
        int n = 0;
        cudaError_t e = cudaSuccess;
        try {
            e = rt::api::cudaGetDeviceCount(&n);
        } catch (const InvalidArgument& bad) {  // the sim's TESSEL_SIM_* settings: no devices, and say why
            r.reason = bad.what();
            r.bad_setting = true;
            return r;
        }
        if (e != cudaSuccess) {
            (void)rt::api::cudaGetLastError();
            r.reason = std::string("no usable CUDA device: the CUDA runtime reports ") + rt::api::cudaGetErrorName(e) +
                       " (" + rt::api::cudaGetErrorString(e) +
                       "). Check that an NVIDIA GPU and its driver are installed (nvidia-smi) and that "
                       "CUDA_VISIBLE_DEVICES does not hide every device; or build with tessel::sim to run on the CPU.";
        } else if (n == 0) {
            r.reason = "no CUDA device is visible (CUDA_VISIBLE_DEVICES may be empty); build with tessel::sim to run on the CPU.";
        }
        r.count = n;
        return r;
    }();
    return a;
}
inline void require_device(Device d) {
    const int n = availability().count;
    if (n == 0 && availability().bad_setting) fail<InvalidArgument>(availability().reason);
    if (n == 0) fail<Unsupported>(availability().reason);
    require(d.index >= 0 && d.index < n, "device ", d.index, " does not exist: ", n, " device(s) are visible (indices 0..",
            n - 1, ")");
}
}  // namespace detail

// Devices the runtime can see; 0 when there is no GPU or driver, or when a TESSEL_SIM_* variable is
// malformed (never throws: unavailable_reason() then quotes the variable, and every call that needs
// a device throws that InvalidArgument).
inline int device_count() { return detail::availability().count; }
inline bool is_available() { return device_count() > 0; }
// A sentence saying why no device is available; empty when one is.
inline std::string unavailable_reason() { return detail::availability().reason; }

// The current device of the calling host thread.
inline Device current_device() {
    detail::require_device(Device{0});
    int d = 0;
    TESSEL_CUDA_CHECK(rt::api::cudaGetDevice(&d));
    return Device{d};
}
inline void set_device(Device d) {
    detail::require_device(d);
    TESSEL_CUDA_CHECK(rt::api::cudaSetDevice(d.index));
}

// Makes `d` current for the lifetime of the guard, then restores the previous device. Only a
// change calls cudaSetDevice: since CUDA 12 it initialises the device's primary context, so setting
// device 0 back for a thread that never chose one would give every process a context there.
class DeviceGuard {
public:
    explicit DeviceGuard(Device d) : previous_(current_device()) {
        if (d.index != previous_.index) set_device(d), changed_ = true;
    }
    ~DeviceGuard() {
        if (changed_ && rt::api::cudaSetDevice(previous_.index) != cudaSuccess) (void)rt::api::cudaGetLastError();
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    Device previous_;
    bool changed_ = false;
};

inline DeviceProperties properties(Device d) {
    detail::require_device(d);
    cudaDeviceProp p{};
    TESSEL_CUDA_CHECK(rt::api::cudaGetDeviceProperties(&p, d.index));
    DeviceProperties r;
    r.index = d.index;
    r.name = p.name;
    r.major = p.major;
    r.minor = p.minor;
    r.sm_count = p.multiProcessorCount;
    r.total_memory = p.totalGlobalMem;
    r.l2_cache_bytes = p.l2CacheSize;
    r.shared_memory_per_block = p.sharedMemPerBlock;
    r.shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
    r.shared_memory_per_sm = p.sharedMemPerMultiprocessor;
    r.max_threads_per_block = p.maxThreadsPerBlock;
    r.warp_size = p.warpSize;
    r.memory_bus_bits = p.memoryBusWidth;
    TESSEL_CUDA_CHECK(rt::api::cudaDeviceGetAttribute(&r.clock_khz, cudaDevAttrClockRate, d.index));
    TESSEL_CUDA_CHECK(rt::api::cudaDeviceGetAttribute(&r.memory_clock_khz, cudaDevAttrMemoryClockRate, d.index));
    {
        DeviceGuard g(d);
        r.free_memory = rt::memory_info().free_bytes;
    }
    r.simulated = backend == Backend::sim;
    return r;
}
inline DeviceProperties properties() { return properties(current_device()); }

// Runtime and driver versions (CUDA's encoding: 1000*major + 10*minor) and whether they fit.
struct Versions {
    int runtime = 0;
    int driver = 0;  // 0 when no driver is installed
    bool compatible = false;
    std::string verdict;  // one sentence
};

// "13.0" from 13000.
inline std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

inline Versions versions() {
    Versions v;
    (void)rt::api::cudaRuntimeGetVersion(&v.runtime);
    if (rt::api::cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
    (void)rt::api::cudaGetLastError();
    if (backend == Backend::sim) {
        v.compatible = true;
        v.verdict = "simulated: the sim implements the CUDA " + version_string(v.runtime) + " runtime API on the CPU";
    } else if (v.driver == 0) {
        v.verdict = "no CUDA driver found; runtime needs a driver supporting CUDA " + version_string(v.runtime) + " or newer";
    } else if (v.driver >= v.runtime) {
        v.compatible = true;
        v.verdict = "ok: driver supports CUDA " + version_string(v.driver) + ", runtime needs " + version_string(v.runtime);
    } else if (v.driver / 1000 == v.runtime / 1000) {
        // Minor version compatibility within a major release (kernels needing newer PTX JIT may still fail).
        v.compatible = true;
        v.verdict = "ok (minor-version compatibility): driver supports CUDA " + version_string(v.driver) +
                    ", runtime needs " + version_string(v.runtime);
    } else {
        v.verdict = "incompatible: driver supports CUDA " + version_string(v.driver) + ", runtime needs " +
                    version_string(v.runtime) + "; update the NVIDIA driver";
    }
    return v;
}

}  // namespace tessel
