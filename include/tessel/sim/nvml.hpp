// The sim's stand-in for the NVML entry points tessel calls (lib/nvml_abi.hpp's Api), with NVML's
// return codes and units, reading the simulated devices:
//  - memory: the sim allocator's capacity and use (all of it this process's, as one process entry),
//    and 1/256 of the capacity reserved, as a driver reserves some (nvmlDeviceGetMemoryInfo's used
//    counts it, _v2's has it apart, as on a GPU);
//  - utilisation: the share of wall time the device's streams ran device work (kernels, copies,
//    fills, the library stand-ins' products), over the window since the previous reading (at least
//    50 ms; NVML's own period is 1/6 to 1 s); memory utilisation is reported equal to it;
//  - power and temperature from a small model: power = 70 W + (700 W - 70 W) x utilisation, the
//    limit 700 W (an H200 SXM's); the temperature moves toward 30 C + 0.06 C/W x power with a 5 s
//    time constant;
//  - clocks: the sim's nominal 2000 MHz SM and 3200 MHz memory clocks, current = maximum; reasons: GpuIdle below 5 % utilisation;
//  - ECC counts 0, PCIe NOT_SUPPORTED (the simulated devices are integrated), no XID events;
// and test hooks that inject what a healthy sim never shows (a temperature, a power draw, clock
// reasons, ECC counts, XID events), as DCGM's injection does, so every monitor policy is tested.
#pragma once

#include <optional>

#include "../core/linkage.hpp"
#include "../lib/nvml_abi.hpp"

namespace tessel::sim::nvml {

using namespace ::tessel::nvml::abi;

TESSEL_API nvmlReturn_t nvmlInit_v2();
TESSEL_API const char* nvmlErrorString(nvmlReturn_t r);
TESSEL_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count);
TESSEL_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device);
TESSEL_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length);
TESSEL_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned sensor, unsigned* celsius);
TESSEL_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* milliwatts);
TESSEL_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned* milliwatts);
TESSEL_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization);
TESSEL_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
TESSEL_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory);
TESSEL_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned* count, nvmlProcessInfo_t* infos);
TESSEL_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples, unsigned* count,
                                                        unsigned long long last_seen);
TESSEL_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned type, unsigned* mhz);
TESSEL_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned type, unsigned* mhz);
TESSEL_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons);
TESSEL_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned error_type, unsigned counter, unsigned long long* count);
TESSEL_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned* generation);
TESSEL_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned* width);
TESSEL_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set);
TESSEL_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set);
TESSEL_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned timeout_ms);
TESSEL_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);
TESSEL_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length);
TESSEL_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci);
TESSEL_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length);

// What a test makes a simulated device report; unset fields keep the model's readings.
struct Injection {
    std::optional<unsigned> temperature_c = std::nullopt;
    std::optional<unsigned> power_mw = std::nullopt;
    std::optional<unsigned> utilization_pct = std::nullopt;
    std::optional<unsigned long long> clocks_event_reasons = std::nullopt;
    std::optional<unsigned long long> ecc_corrected = std::nullopt, ecc_uncorrected = std::nullopt;
    // true: the device has fallen off the bus; every call on it (its handle too) answers
    // NVML_ERROR_GPU_IS_LOST, as NVML does after XID 79. false brings it back.
    std::optional<bool> lost = std::nullopt;
};
// Sets device `device`'s injected fields (the set ones replace earlier injections of the same field).
TESSEL_API void inject(int device, const Injection& values);
// Forgets every injection.
TESSEL_API void clear_injections();
// Delivers an XID critical-error event for `device` to every event set registered for it.
TESSEL_API void inject_xid(int device, unsigned long long xid);

}  // namespace tessel::sim::nvml

#if TESSEL_DEFINE_RUNTIME
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "runtime_state.hpp"

namespace tessel::sim::nvml {

namespace detail {

using Clock = std::chrono::steady_clock;

// One device's model state and injections.
struct DeviceState {
    bool started = false;
    Clock::time_point window_start, last_temperature;
    std::uint64_t window_busy = 0;
    unsigned utilization = 0;
    double temperature = 0;
    Injection injected;
    // This process's utilisation samples, newest first, as the driver buffers them: a query with
    // lastSeenTimeStamp 0 returns every one (several per process, in no documented order).
    std::deque<nvmlProcessUtilizationSample_t> process_samples;
};
constexpr std::size_t max_process_samples = 16;
struct EventSet {
    std::vector<int> devices;
    std::deque<nvmlEventData_t> pending;
};
struct State {
    std::mutex m;
    std::condition_variable event_cv;
    std::vector<DeviceState> devices;
    std::vector<EventSet*> sets;
};
inline State& state() {
    static State* s = new State();  // never destroyed: the monitor's thread may read during exit
    return *s;
}

inline int device_count() {
    std::lock_guard lk(api::detail::rt().m);
    return int(api::detail::rt().devices.size());
}
inline int index_of(nvmlDevice_t d) {
    const auto i = reinterpret_cast<std::intptr_t>(d) - 1;
    return i >= 0 && i < device_count() ? int(i) : -1;
}

constexpr double idle_w = 70, limit_w = 700, ambient_c = 30, c_per_w = 0.06, tau_s = 5;

// The device's utilisation and temperature brought up to now. Caller holds state().m.
inline DeviceState& update(int i) {
    State& s = state();
    if (s.devices.size() <= std::size_t(i)) s.devices.resize(std::size_t(i) + 1);
    DeviceState& d = s.devices[std::size_t(i)];
    const auto now = Clock::now();
    const std::atomic<std::uint64_t>* counter = busy_ns(i);
    const std::uint64_t busy = counter ? counter->load(std::memory_order_relaxed) : 0;
    if (!d.started) {
        d.started = true;
        d.window_start = d.last_temperature = now;
        d.window_busy = busy;
        d.temperature = ambient_c + c_per_w * idle_w;
    }
    const double window = std::chrono::duration<double>(now - d.window_start).count();
    if (window >= 0.05) {
        d.utilization = unsigned(std::clamp(std::lround(100.0 * double(busy - d.window_busy) * 1e-9 / window), 0L, 100L));
        d.window_start = now;
        d.window_busy = busy;
    }
    const double dt = std::chrono::duration<double>(now - d.last_temperature).count();
    const double power = idle_w + (limit_w - idle_w) * d.utilization / 100.0;
    d.temperature += (ambient_c + c_per_w * power - d.temperature) * (1 - std::exp(-dt / tau_s));
    d.last_temperature = now;
    return d;
}
inline unsigned utilization(const DeviceState& d) { return d.injected.utilization_pct.value_or(d.utilization); }
// Whether device i is lost: injected (Injection::lost), else TESSEL_SIM_NVML_LOST names it.
inline bool lost(int i) {
    const bool by_env = config().nvml_lost_device == i;
    std::lock_guard lk(state().m);
    return state().devices.size() > std::size_t(i) ? state().devices[std::size_t(i)].injected.lost.value_or(by_env) : by_env;
}

}  // namespace detail

#define TESSEL_SIM_NVML_DEVICE(d, i)                              \
    const int i = detail::index_of(d);                            \
    if (i < 0) return NVML_ERROR_INVALID_ARGUMENT;                \
    if (detail::lost(i)) return NVML_ERROR_GPU_IS_LOST;

TESSEL_API nvmlReturn_t nvmlInit_v2() { return NVML_SUCCESS; }

TESSEL_API const char* nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
        case NVML_ERROR_NOT_FOUND: return "Not Found";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_TIMEOUT: return "Timeout";
        case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument Version Mismatch";
        default: return "Unknown Error";
    }
}

TESSEL_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned* count) {
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = unsigned(detail::device_count());
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t* device) {
    if (!device || index >= unsigned(detail::device_count())) return NVML_ERROR_INVALID_ARGUMENT;
    if (detail::lost(int(index))) return NVML_ERROR_GPU_IS_LOST;
    *device = reinterpret_cast<nvmlDevice_t>(std::intptr_t(index) + 1);
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned length) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    std::string n;
    {
        std::lock_guard lk(api::detail::rt().m);
        n = api::detail::rt().devices[std::size_t(i)].prop.name;
    }
    if (!name || length < n.size() + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    std::memcpy(name, n.c_str(), n.size() + 1);
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned sensor, unsigned* celsius) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (sensor != NVML_TEMPERATURE_GPU || !celsius) return NVML_ERROR_INVALID_ARGUMENT;
    std::lock_guard lk(detail::state().m);
    const detail::DeviceState& d = detail::update(i);
    *celsius = d.injected.temperature_c.value_or(unsigned(std::lround(d.temperature)));
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned* milliwatts) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!milliwatts) return NVML_ERROR_INVALID_ARGUMENT;
    std::lock_guard lk(detail::state().m);
    const detail::DeviceState& d = detail::update(i);
    const double w = detail::idle_w + (detail::limit_w - detail::idle_w) * detail::utilization(d) / 100.0;
    *milliwatts = d.injected.power_mw.value_or(unsigned(std::lround(w * 1000)));
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned* milliwatts) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    (void)i;
    if (!milliwatts) return NVML_ERROR_INVALID_ARGUMENT;
    *milliwatts = unsigned(detail::limit_w * 1000);
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    std::lock_guard lk(detail::state().m);
    const unsigned u = detail::utilization(detail::update(i));
    *utilization = {u, u};
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    std::lock_guard lk(api::detail::rt().m);
    const SimDevice& d = api::detail::rt().devices[std::size_t(i)];
    const unsigned long long reserved = d.capacity / 256, used = std::min<unsigned long long>(d.used + reserved, d.capacity);
    *memory = {d.capacity, d.capacity - used, used};
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    std::lock_guard lk(api::detail::rt().m);
    const SimDevice& d = api::detail::rt().devices[std::size_t(i)];
    const unsigned long long reserved = d.capacity / 256;
    memory->total = d.capacity;
    memory->reserved = reserved;
    memory->used = d.used;
    memory->free = d.capacity - std::min<unsigned long long>(d.used + reserved, d.capacity);
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned* count, nvmlProcessInfo_t* infos) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    std::size_t used = 0;
    {
        std::lock_guard lk(api::detail::rt().m);
        used = api::detail::rt().devices[std::size_t(i)].used;
    }
    const unsigned have = used > 0 ? 1 : 0;  // this process, once it holds device memory
    if (*count < have || (have && !infos)) {
        *count = have;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = have;
    if (have) infos[0] = {unsigned(::getpid()), used, 0xFFFFFFFFu, 0xFFFFFFFFu};
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* samples, unsigned* count,
                                                        unsigned long long last_seen) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    const auto now_us = static_cast<unsigned long long>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
    std::lock_guard lk(detail::state().m);
    detail::DeviceState& d = detail::update(i);
    // Each query takes a sample now (the driver samples on its own clock), kept with the older ones.
    const unsigned u = detail::utilization(d);
    if (d.process_samples.empty() || d.process_samples.front().timeStamp < now_us)
        d.process_samples.push_front({unsigned(::getpid()), now_us, u, u, 0, 0});
    if (d.process_samples.size() > detail::max_process_samples) d.process_samples.pop_back();
    unsigned have = 0;
    for (const auto& x : d.process_samples) have += x.timeStamp > last_seen;
    if (*count < have || (have && !samples)) {
        *count = have;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = have;
    unsigned k = 0;
    for (const auto& x : d.process_samples)
        if (x.timeStamp > last_seen) samples[k++] = x;
    return have ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;  // NVML: no sample newer than last_seen
}

TESSEL_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned type, unsigned* mhz) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    (void)i;
    if (!mhz || (type != NVML_CLOCK_SM && type != NVML_CLOCK_MEM && type != 0)) return NVML_ERROR_INVALID_ARGUMENT;
    *mhz = type == NVML_CLOCK_MEM ? 3200 : 2000;  // the nominal clocks cudaDevAttrClockRate / MemoryClockRate report
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, unsigned type, unsigned* mhz) {
    return nvmlDeviceGetClockInfo(device, type, mhz);  // the sim's clocks never drop
}

TESSEL_API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* reasons) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!reasons) return NVML_ERROR_INVALID_ARGUMENT;
    std::lock_guard lk(detail::state().m);
    const detail::DeviceState& d = detail::update(i);
    *reasons = d.injected.clocks_event_reasons.value_or(detail::utilization(d) < 5 ? 0x1ull : 0ull);  // GpuIdle
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned error_type, unsigned counter, unsigned long long* count) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!count || error_type > 1 || counter > 1) return NVML_ERROR_INVALID_ARGUMENT;
    std::lock_guard lk(detail::state().m);
    const detail::DeviceState& d = detail::update(i);
    *count = (error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED ? d.injected.ecc_corrected : d.injected.ecc_uncorrected).value_or(0);
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned*) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    (void)i;
    return NVML_ERROR_NOT_SUPPORTED;  // integrated: no PCIe link
}
TESSEL_API nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned*) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    (void)i;
    return NVML_ERROR_NOT_SUPPORTED;
}

TESSEL_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set) {
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    auto* s = new detail::EventSet();
    std::lock_guard lk(detail::state().m);
    detail::state().sets.push_back(s);
    *set = reinterpret_cast<nvmlEventSet_t>(s);
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~nvmlEventTypeXidCriticalError) return NVML_ERROR_NOT_SUPPORTED;  // the sim raises XID events only
    std::lock_guard lk(detail::state().m);
    reinterpret_cast<detail::EventSet*>(set)->devices.push_back(i);
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned timeout_ms) {
    if (!set || !data) return NVML_ERROR_INVALID_ARGUMENT;
    auto* s = reinterpret_cast<detail::EventSet*>(set);
    std::unique_lock lk(detail::state().m);
    if (!detail::state().event_cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return !s->pending.empty(); }))
        return NVML_ERROR_TIMEOUT;
    *data = s->pending.front();
    s->pending.pop_front();
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!set) return NVML_ERROR_INVALID_ARGUMENT;
    auto* s = reinterpret_cast<detail::EventSet*>(set);
    {
        std::lock_guard lk(detail::state().m);
        std::erase(detail::state().sets, s);
    }
    delete s;
    return NVML_SUCCESS;
}

TESSEL_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned length) {
    constexpr char v[] = "sim";
    if (!version || length < sizeof v) return NVML_ERROR_INSUFFICIENT_SIZE;
    std::memcpy(version, v, sizeof v);
    return NVML_SUCCESS;
}

// Device i sits on bus i (as its cudaDeviceProp::pciBusID says); its UUID is made of its index.
TESSEL_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    *pci = {};
    const unsigned bus = unsigned(i) & 0xFFu;  // a PCI bus number is 8 bits (and fits the legacy id's 16 bytes)
    pci->bus = bus;
    pci->pciDeviceId = 0x233510DEu;  // an H200's device id with NVIDIA's vendor id
    std::snprintf(pci->busId, sizeof pci->busId, "00000000:%02X:00.0", bus);
    std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", bus);
    return NVML_SUCCESS;
}
TESSEL_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned length) {
    TESSEL_SIM_NVML_DEVICE(device, i)
    char u[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    const int n = std::snprintf(u, sizeof u, "GPU-7e55e100-0000-4000-8000-%012x", unsigned(i));
    if (!uuid || length < unsigned(n) + 1) return NVML_ERROR_INSUFFICIENT_SIZE;
    std::memcpy(uuid, u, std::size_t(n) + 1);
    return NVML_SUCCESS;
}

TESSEL_API void inject(int device, const Injection& values) {
    std::lock_guard lk(detail::state().m);
    Injection& in = detail::update(device).injected;
    if (values.temperature_c) in.temperature_c = values.temperature_c;
    if (values.power_mw) in.power_mw = values.power_mw;
    if (values.utilization_pct) in.utilization_pct = values.utilization_pct;
    if (values.clocks_event_reasons) in.clocks_event_reasons = values.clocks_event_reasons;
    if (values.ecc_corrected) in.ecc_corrected = values.ecc_corrected;
    if (values.ecc_uncorrected) in.ecc_uncorrected = values.ecc_uncorrected;
    if (values.lost) in.lost = values.lost;
}

TESSEL_API void clear_injections() {
    std::lock_guard lk(detail::state().m);
    for (detail::DeviceState& d : detail::state().devices) d.injected = {};
}

TESSEL_API void inject_xid(int device, unsigned long long xid) {
    {
        std::lock_guard lk(detail::state().m);
        for (detail::EventSet* s : detail::state().sets)
            if (std::find(s->devices.begin(), s->devices.end(), device) != s->devices.end())
                s->pending.push_back({reinterpret_cast<nvmlDevice_t>(std::intptr_t(device) + 1), nvmlEventTypeXidCriticalError, xid, 0, 0});
    }
    detail::state().event_cv.notify_all();
}

#undef TESSEL_SIM_NVML_DEVICE

}  // namespace tessel::sim::nvml
#endif  // TESSEL_DEFINE_RUNTIME
