// NVML, loaded at run time (dlopen of libnvidia-ml.so.1), for what the CUDA runtime does not report:
// why the clocks are being held down. Without a driver, or on the sim, every query answers "unknown"
// instead of failing, so programs using it start everywhere.
#pragma once

#include <dlfcn.h>

#include <cstdint>
#include <optional>
#include <string>

#include "../runtime/device.hpp"

namespace tessel::nvml {

namespace detail {
using nvmlDevice = void*;
// The few entry points used, resolved once; all null when NVML is not there.
struct Api {
    int (*init)() = nullptr;
    int (*handle_by_pci)(const char*, nvmlDevice*) = nullptr;
    int (*reasons)(nvmlDevice, unsigned long long*) = nullptr;
    bool ok = false;
};
inline const Api& api() {
    static const Api a = [] {
        Api r;
        if (backend == Backend::sim) return r;
        void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) return r;
        r.init = reinterpret_cast<int (*)()>(::dlsym(lib, "nvmlInit_v2"));
        r.handle_by_pci = reinterpret_cast<int (*)(const char*, nvmlDevice*)>(::dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
        r.reasons = reinterpret_cast<int (*)(nvmlDevice, unsigned long long*)>(::dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons"));
        if (!r.reasons)
            r.reasons = reinterpret_cast<int (*)(nvmlDevice, unsigned long long*)>(::dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
        r.ok = r.init && r.handle_by_pci && r.reasons && r.init() == 0;
        return r;
    }();
    return a;
}
}  // namespace detail

// NVML's clock event (throttle) reason bits, as documented for nvmlDeviceGetCurrentClocksEventReasons.
enum ClockReason : std::uint64_t {
    gpu_idle = 0x1,
    applications_clocks = 0x2,
    sw_power_cap = 0x4,
    hw_slowdown = 0x8,
    sync_boost = 0x10,
    sw_thermal = 0x20,
    hw_thermal = 0x40,
    hw_power_brake = 0x80,
};

// The reasons device `d`'s clocks are below their maximum now; nullopt when NVML cannot tell.
inline std::optional<std::uint64_t> clock_reasons(Device d) {
#if defined(TESSEL_BACKEND_CUDA)
    const auto& a = detail::api();
    if (!a.ok) return std::nullopt;
    char pci[32] = {};
    if (rt::api::cudaDeviceGetPCIBusId(pci, sizeof pci, d.index) != cudaSuccess) {
        (void)rt::api::cudaGetLastError();
        return std::nullopt;
    }
    detail::nvmlDevice dev = nullptr;
    unsigned long long bits = 0;
    if (a.handle_by_pci(pci, &dev) != 0 || a.reasons(dev, &bits) != 0) return std::nullopt;
    return std::uint64_t(bits);
#else
    (void)d;
    return std::nullopt;
#endif
}

// The reasons that slow a benchmark down (power, thermal, hardware slowdown), as text; empty if none.
inline std::string throttling(std::uint64_t bits) {
    std::string s;
    auto add = [&](std::uint64_t bit, const char* name) {
        if (bits & bit) s += (s.empty() ? "" : ", ") + std::string(name);
    };
    add(sw_power_cap, "power cap");
    add(hw_slowdown, "hardware slowdown");
    add(sw_thermal, "software thermal slowdown");
    add(hw_thermal, "hardware thermal slowdown");
    add(hw_power_brake, "power brake");
    return s;
}

}  // namespace tessel::nvml
