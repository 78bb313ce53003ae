// NVML for tessel: its entry points, loaded at run time (dlopen of libnvidia-ml.so.1 on CUDA, the
// sim's stand-in sim/nvml.hpp on the sim), and what tessel reads through them: a device's readings
// (DeviceReading: temperature, power, utilisation, memory, clocks and why they are held down, ECC
// counts, PCIe link), its compute processes, and XID events (XidWatch). Without a driver, or where
// NVML refuses, a reading is absent and available()/unavailable_reason() say why: never an abort,
// so programs using it start everywhere.
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "../runtime/device.hpp"
#include "nvml_abi.hpp"

#if defined(TESSEL_BACKEND_SIM)
#include "../sim/nvml.hpp"
#endif

namespace tessel::nvml {

namespace detail {
struct Loaded {
    abi::Api api;
    bool ok = false;
    std::string reason;  // why not, when !ok
};

template <class F>
void resolve(void* lib, F& slot, const char* name) {
    slot = reinterpret_cast<F>(::dlsym(lib, name));
}

inline const Loaded& loaded() {
    static const Loaded l = [] {
        Loaded r;
        abi::Api& a = r.api;
#if defined(TESSEL_BACKEND_SIM)
        namespace s = ::tessel::sim::nvml;
        a = {s::nvmlInit_v2, s::nvmlErrorString, s::nvmlDeviceGetCount_v2, s::nvmlDeviceGetHandleByIndex_v2, nullptr,
             s::nvmlDeviceGetName, s::nvmlDeviceGetTemperature, s::nvmlDeviceGetPowerUsage, s::nvmlDeviceGetEnforcedPowerLimit,
             s::nvmlDeviceGetUtilizationRates, s::nvmlDeviceGetMemoryInfo, s::nvmlDeviceGetComputeRunningProcesses_v3,
             s::nvmlDeviceGetProcessUtilization, s::nvmlDeviceGetClockInfo, s::nvmlDeviceGetMaxClockInfo,
             s::nvmlDeviceGetCurrentClocksEventReasons, s::nvmlDeviceGetTotalEccErrors, s::nvmlDeviceGetCurrPcieLinkGeneration,
             s::nvmlDeviceGetCurrPcieLinkWidth, s::nvmlEventSetCreate, s::nvmlDeviceRegisterEvents, s::nvmlEventSetWait_v2,
             s::nvmlEventSetFree, s::nvmlSystemGetDriverVersion, s::nvmlDeviceGetMemoryInfo_v2, s::nvmlDeviceGetPciInfo_v3,
             s::nvmlDeviceGetUUID};
#else
        void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            r.reason = "NVML (libnvidia-ml.so.1) is not installed: no NVIDIA driver on this machine";
            return r;
        }
        resolve(lib, a.init, "nvmlInit_v2");
        resolve(lib, a.error_string, "nvmlErrorString");
        resolve(lib, a.device_count, "nvmlDeviceGetCount_v2");
        resolve(lib, a.handle_by_index, "nvmlDeviceGetHandleByIndex_v2");
        resolve(lib, a.handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
        resolve(lib, a.name, "nvmlDeviceGetName");
        resolve(lib, a.temperature, "nvmlDeviceGetTemperature");
        resolve(lib, a.power_usage, "nvmlDeviceGetPowerUsage");
        resolve(lib, a.enforced_power_limit, "nvmlDeviceGetEnforcedPowerLimit");
        resolve(lib, a.utilization_rates, "nvmlDeviceGetUtilizationRates");
        resolve(lib, a.memory_info, "nvmlDeviceGetMemoryInfo");
        resolve(lib, a.memory_info_v2, "nvmlDeviceGetMemoryInfo_v2");
        resolve(lib, a.compute_running_processes, "nvmlDeviceGetComputeRunningProcesses_v3");
        resolve(lib, a.process_utilization, "nvmlDeviceGetProcessUtilization");
        resolve(lib, a.clock_info, "nvmlDeviceGetClockInfo");
        resolve(lib, a.max_clock_info, "nvmlDeviceGetMaxClockInfo");
        resolve(lib, a.clocks_event_reasons, "nvmlDeviceGetCurrentClocksEventReasons");
        if (!a.clocks_event_reasons) resolve(lib, a.clocks_event_reasons, "nvmlDeviceGetCurrentClocksThrottleReasons");  // before 12.2
        resolve(lib, a.total_ecc_errors, "nvmlDeviceGetTotalEccErrors");
        resolve(lib, a.pcie_link_generation, "nvmlDeviceGetCurrPcieLinkGeneration");
        resolve(lib, a.pcie_link_width, "nvmlDeviceGetCurrPcieLinkWidth");
        resolve(lib, a.event_set_create, "nvmlEventSetCreate");
        resolve(lib, a.register_events, "nvmlDeviceRegisterEvents");
        resolve(lib, a.event_set_wait, "nvmlEventSetWait_v2");
        resolve(lib, a.event_set_free, "nvmlEventSetFree");
        resolve(lib, a.driver_version, "nvmlSystemGetDriverVersion");
        resolve(lib, a.pci_info, "nvmlDeviceGetPciInfo_v3");
        resolve(lib, a.uuid, "nvmlDeviceGetUUID");
        if (!a.init || !a.handle_by_pci_bus_id) {
            r.reason = "libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2 (a driver older than NVML 12's)";
            return r;
        }
#endif
        if (const abi::nvmlReturn_t s = a.init(); s != abi::NVML_SUCCESS) {
            r.reason = std::string("nvmlInit failed: ") + (a.error_string ? a.error_string(s) : "error " + std::to_string(s));
            return r;
        }
        r.ok = true;
        return r;
    }();
    return l;
}

// What went wrong reading a device beyond the fields it does not report (NOT_SUPPORTED,
// NO_PERMISSION, NOT_FOUND leave a field empty quietly, unless `always`: a device whose handle is
// refused so says why): the first failed call and NVML's words (the first that said the GPU is
// lost, once one did), and whether one did.
struct Trouble {
    bool lost = false;
    std::string error;
    void note(abi::nvmlReturn_t r, const char* call, bool always = false) {
        if (r == abi::NVML_SUCCESS ||
            (!always && (r == abi::NVML_ERROR_NOT_SUPPORTED || r == abi::NVML_ERROR_NO_PERMISSION || r == abi::NVML_ERROR_NOT_FOUND)))
            return;
        const bool now_lost = r == abi::NVML_ERROR_GPU_IS_LOST && !lost;
        lost = lost || now_lost;
        if (!error.empty() && !now_lost) return;  // the loss replaces an earlier, lesser failure
        const char* words = loaded().api.error_string ? loaded().api.error_string(r) : nullptr;
        error = std::string(call) + ": " + (words ? words : "NVML error") + " (" + std::to_string(r) + ")";
    }
};

// NVML's handle for tessel's device d (by PCI bus id on CUDA: NVML and CUDA may order devices
// differently; by index on the sim), or null (and why, in `trouble` where given). A handle found is
// kept: it stays valid while NVML is loaded, and a GPU that later falls off the bus, whose CUDA
// calls fail, is then still asked (and answers GPU_IS_LOST).
inline abi::nvmlDevice_t handle(Device d, Trouble* trouble = nullptr) {
    const Loaded& l = loaded();
    if (!l.ok) return nullptr;
    static std::mutex m;
    static auto* found = new std::map<int, abi::nvmlDevice_t>();  // never destroyed: monitors may sample during exit
    {
        std::lock_guard lk(m);
        if (const auto it = found->find(d.index); it != found->end()) return it->second;
    }
    abi::nvmlDevice_t h = nullptr;
#if defined(TESSEL_BACKEND_CUDA)
    char pci[32] = {};
    if (const cudaError_t e = rt::api::cudaDeviceGetPCIBusId(pci, sizeof pci, d.index); e != cudaSuccess) {
        (void)rt::api::cudaGetLastError();
        if (trouble && trouble->error.empty()) trouble->error = std::string("cudaDeviceGetPCIBusId: ") + rt::api::cudaGetErrorName(e);
        return nullptr;
    }
    const abi::nvmlReturn_t r = l.api.handle_by_pci_bus_id(pci, &h);
    const char* call = "nvmlDeviceGetHandleByPciBusId_v2";
#else
    const abi::nvmlReturn_t r = l.api.handle_by_index(unsigned(d.index), &h);
    const char* call = "nvmlDeviceGetHandleByIndex_v2";
#endif
    if (r != abi::NVML_SUCCESS) {
        if (trouble) trouble->note(r, call, true);
        return nullptr;
    }
    std::lock_guard lk(m);
    found->emplace(d.index, h);
    return h;
}

// NVML's handle for its own device `index` (NVML's numbering), or null (and why, in `trouble`).
inline abi::nvmlDevice_t handle_at(unsigned index, Trouble* trouble = nullptr) {
    const Loaded& l = loaded();
    abi::nvmlDevice_t h = nullptr;
    if (!l.ok || !l.api.handle_by_index) return nullptr;
    if (const abi::nvmlReturn_t r = l.api.handle_by_index(index, &h); r != abi::NVML_SUCCESS) {
        if (trouble) trouble->note(r, "nvmlDeviceGetHandleByIndex_v2", true);
        return nullptr;
    }
    return h;
}

// Calls an entry point that may be missing; the value when it answered NVML_SUCCESS, else empty
// (and a failure that is not a missing field noted in `trouble`).
template <class T, class F, class... Args>
std::optional<T> query(Trouble* trouble, const char* call, F fn, Args... args) {
    T v{};
    if (!fn) return std::nullopt;
    const abi::nvmlReturn_t r = fn(args..., &v);
    if (r == abi::NVML_SUCCESS) return v;
    if (trouble) trouble->note(r, call);
    return std::nullopt;
}
}  // namespace detail

// Whether NVML answers on this machine (always on the sim), and if not, why.
inline bool available() { return detail::loaded().ok; }
inline std::string unavailable_reason() { return detail::loaded().ok ? std::string() : detail::loaded().reason; }
// The entry points, for what tessel does not wrap (check available() first).
inline const abi::Api& api() { return detail::loaded().api; }

// A GPU by NVML's numbering (nvidia-smi's), which need not be CUDA's (CUDA puts the fastest first
// and hides what CUDA_VISIBLE_DEVICES leaves out; NVML promises no order across reboots). For when CUDA sees no device but NVML does —
// a driver too old for this runtime, or the only GPU lost before the process started — so that the
// readings, and the loss, still show.
struct Index {
    unsigned value = 0;
};

// How many GPUs NVML sees (a lost one included); empty when NVML is unavailable or cannot count.
inline std::optional<unsigned> device_count() {
    if (!available() || !api().device_count) return std::nullopt;
    unsigned n = 0;
    if (api().device_count(&n) != abi::NVML_SUCCESS) return std::nullopt;
    return n;
}

// The product name NVML gives for GPU i; empty when it cannot (a lost GPU among them).
inline std::optional<std::string> name(Index i) {
    const abi::nvmlDevice_t h = detail::handle_at(i.value);
    char buffer[96] = {};  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
    if (!h || !api().name || api().name(h, buffer, sizeof buffer) != abi::NVML_SUCCESS) return std::nullopt;
    return std::string(buffer);
}

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
    display_clocks = 0x100,
};

// The names of the reasons in `bits` (nvidia-smi's words), in bit order.
inline std::vector<std::string> clock_reason_names(std::uint64_t bits) {
    static const std::pair<std::uint64_t, const char*> names[] = {
        {gpu_idle, "idle"},
        {applications_clocks, "applications clocks setting"},
        {sw_power_cap, "power cap"},
        {hw_slowdown, "hardware slowdown"},
        {sync_boost, "sync boost"},
        {sw_thermal, "software thermal slowdown"},
        {hw_thermal, "hardware thermal slowdown"},
        {hw_power_brake, "power brake"},
        {display_clocks, "display clock setting"}};
    std::vector<std::string> out;
    for (const auto& [bit, name] : names)
        if (bits & bit) out.emplace_back(name);
    if (bits & ~std::uint64_t(0x1FF)) out.emplace_back("other (bits " + std::to_string(bits & ~std::uint64_t(0x1FF)) + ")");
    return out;
}

// The reasons that slow a benchmark down (power, thermal, hardware slowdown), as text; empty if none.
inline std::string throttling(std::uint64_t bits) {
    std::string s;
    for (const std::string& n : clock_reason_names(bits & (sw_power_cap | hw_slowdown | sw_thermal | hw_thermal | hw_power_brake)))
        s += (s.empty() ? "" : ", ") + n;
    return s;
}

// One device's state as NVML reports it; a field NVML does not report for this device is empty.
struct DeviceReading {
    int device = 0;                                     // tessel's index (NVML's, for read(Index))
    std::chrono::system_clock::time_point time;         // when it was read
    std::optional<unsigned> temperature_c;
    std::optional<double> power_w, power_limit_w;
    std::optional<unsigned> gpu_utilization_pct;        // the share of the last sample period a kernel ran
    std::optional<unsigned> memory_utilization_pct;     // the share the memory controller was busy
    // As nvidia-smi's memory.used/free/reserved (NVML's _v2 reading: the driver's reserved memory
    // apart); with a driver older than 510, used includes it and reserved is absent.
    std::optional<std::uint64_t> memory_used_bytes, memory_total_bytes, memory_free_bytes, memory_reserved_bytes;
    std::optional<unsigned> sm_clock_mhz, memory_clock_mhz, sm_clock_max_mhz, memory_clock_max_mhz;
    std::optional<std::uint64_t> clock_event_reasons;   // ClockReason bits
    std::optional<std::uint64_t> ecc_corrected, ecc_uncorrected;  // volatile counts (since the driver loaded)
    std::optional<unsigned> pcie_generation, pcie_width;
    // NVML answered NVML_ERROR_GPU_IS_LOST: the GPU has fallen off the bus (XID 79); nothing queued
    // on it will complete, and the readings above are empty.
    bool lost = false;
    // The first call that failed for another reason than a field this device does not report, with
    // NVML's words (empty when every call answered or was only unsupported).
    std::string error;
};

namespace detail {
// The fields of `r` that device `h` reports.
inline void read_fields(abi::nvmlDevice_t h, DeviceReading& r, Trouble& trouble) {
    const abi::Api& a = api();
    Trouble* t = &trouble;
    r.temperature_c = query<unsigned>(t, "nvmlDeviceGetTemperature", a.temperature, h, abi::NVML_TEMPERATURE_GPU);
    if (auto mw = query<unsigned>(t, "nvmlDeviceGetPowerUsage", a.power_usage, h)) r.power_w = *mw / 1000.0;
    if (auto mw = query<unsigned>(t, "nvmlDeviceGetEnforcedPowerLimit", a.enforced_power_limit, h)) r.power_limit_w = *mw / 1000.0;
    if (auto u = query<abi::nvmlUtilization_t>(t, "nvmlDeviceGetUtilizationRates", a.utilization_rates, h))
        r.gpu_utilization_pct = u->gpu, r.memory_utilization_pct = u->memory;
    abi::nvmlMemory_v2_t m2{};
    m2.version = abi::nvmlMemory_v2;
    const abi::nvmlReturn_t v2 = a.memory_info_v2 ? a.memory_info_v2(h, &m2) : abi::NVML_ERROR_NOT_SUPPORTED;
    if (v2 == abi::NVML_SUCCESS) {
        r.memory_used_bytes = m2.used, r.memory_total_bytes = m2.total, r.memory_free_bytes = m2.free, r.memory_reserved_bytes = m2.reserved;
    } else if (auto m = query<abi::nvmlMemory_t>(t, "nvmlDeviceGetMemoryInfo", a.memory_info, h)) {
        r.memory_used_bytes = m->used, r.memory_total_bytes = m->total, r.memory_free_bytes = m->free;
    } else if (v2 != abi::NVML_ERROR_ARGUMENT_VERSION_MISMATCH) {
        trouble.note(v2, "nvmlDeviceGetMemoryInfo_v2");
    }
    r.sm_clock_mhz = query<unsigned>(t, "nvmlDeviceGetClockInfo", a.clock_info, h, abi::NVML_CLOCK_SM);
    r.memory_clock_mhz = query<unsigned>(t, "nvmlDeviceGetClockInfo", a.clock_info, h, abi::NVML_CLOCK_MEM);
    r.sm_clock_max_mhz = query<unsigned>(t, "nvmlDeviceGetMaxClockInfo", a.max_clock_info, h, abi::NVML_CLOCK_SM);
    r.memory_clock_max_mhz = query<unsigned>(t, "nvmlDeviceGetMaxClockInfo", a.max_clock_info, h, abi::NVML_CLOCK_MEM);
    r.clock_event_reasons = query<unsigned long long>(t, "nvmlDeviceGetCurrentClocksEventReasons", a.clocks_event_reasons, h);
    r.ecc_corrected = query<unsigned long long>(t, "nvmlDeviceGetTotalEccErrors", a.total_ecc_errors, h,
                                                abi::NVML_MEMORY_ERROR_TYPE_CORRECTED, abi::NVML_VOLATILE_ECC);
    r.ecc_uncorrected = query<unsigned long long>(t, "nvmlDeviceGetTotalEccErrors", a.total_ecc_errors, h,
                                                  abi::NVML_MEMORY_ERROR_TYPE_UNCORRECTED, abi::NVML_VOLATILE_ECC);
    r.pcie_generation = query<unsigned>(t, "nvmlDeviceGetCurrPcieLinkGeneration", a.pcie_link_generation, h);
    r.pcie_width = query<unsigned>(t, "nvmlDeviceGetCurrPcieLinkWidth", a.pcie_link_width, h);
}

// A reading of the device of handle h (null: none was found, `trouble` says why), as `index`.
inline DeviceReading reading(int index, abi::nvmlDevice_t h, Trouble& trouble) {
    DeviceReading r;
    r.device = index;
    r.time = std::chrono::system_clock::now();
    if (h) read_fields(h, r, trouble);
    r.lost = trouble.lost;
    r.error = std::move(trouble.error);
    return r;
}
}  // namespace detail

// Reads every field NVML gives for device d (all empty when NVML is unavailable; `lost` and
// `error` say when NVML failed for another reason than a field the device does not report).
inline DeviceReading read(Device d) {
    detail::Trouble trouble;
    const abi::nvmlDevice_t h = detail::handle(d, &trouble);
    return detail::reading(d.index, h, trouble);
}
// The same for NVML's GPU i (DeviceReading::device is then NVML's index).
inline DeviceReading read(Index i) {
    detail::Trouble trouble;
    const abi::nvmlDevice_t h = detail::handle_at(i.value, &trouble);
    return detail::reading(int(i.value), h, trouble);
}

// What names a GPU for good, as nvidia-smi's uuid ("GPU-" and 32 hex digits) and pci.bus_id
// ("00000000:01:00.0"): what to tell the people who reseat or replace it. Empty where NVML cannot say.
struct Identity {
    std::optional<std::string> uuid, pci_bus_id;
};
namespace detail {
inline Identity identity_of(abi::nvmlDevice_t h) {
    Identity id;
    const abi::Api& a = api();
    if (!h) return id;
    char uuid[abi::NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (a.uuid && a.uuid(h, uuid, sizeof uuid) == abi::NVML_SUCCESS) id.uuid = std::string(uuid);
    abi::nvmlPciInfo_t pci{};
    if (a.pci_info && a.pci_info(h, &pci) == abi::NVML_SUCCESS) id.pci_bus_id = std::string(pci.busId, ::strnlen(pci.busId, sizeof pci.busId));
    return id;
}
}  // namespace detail
// The driver's version ("560.35.03"), as nvidia-smi's driver_version; empty without NVML.
inline std::optional<std::string> driver_version() {
    char v[96] = {};  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80
    if (!available() || !api().driver_version || api().driver_version(v, sizeof v) != abi::NVML_SUCCESS) return std::nullopt;
    return std::string(v);
}
// Device d's identity, or NVML's GPU i's.
inline Identity identity(Device d) { return detail::identity_of(detail::handle(d)); }
inline Identity identity(Index i) { return detail::identity_of(detail::handle_at(i.value)); }

// A process using a device, as nvidia-smi's process table shows it.
struct ProcessReading {
    unsigned pid = 0;
    std::optional<std::uint64_t> memory_bytes;  // absent where NVML has no figure (NVML_VALUE_NOT_AVAILABLE)
    std::optional<unsigned> sm_utilization_pct, memory_utilization_pct;  // its latest sample, where NVML has one
};

namespace detail {
// The compute processes on the device of handle h (empty when h is null or NVML refuses).
inline std::vector<ProcessReading> processes_of(abi::nvmlDevice_t h) {
    std::vector<ProcessReading> out;
    const abi::Api& a = api();
    if (!h || !a.compute_running_processes) return out;
    std::vector<abi::nvmlProcessInfo_t> infos(8);
    for (int attempt = 0; attempt < 4; ++attempt) {  // the list can grow between the calls
        unsigned count = unsigned(infos.size());
        const abi::nvmlReturn_t s = a.compute_running_processes(h, &count, infos.data());
        if (s == abi::NVML_ERROR_INSUFFICIENT_SIZE) {
            infos.resize(count + 8);
            continue;
        }
        if (s != abi::NVML_SUCCESS) return out;
        for (unsigned i = 0; i < count; ++i) {
            const unsigned long long bytes = infos[i].usedGpuMemory;
            out.push_back({infos[i].pid, bytes == abi::NVML_VALUE_NOT_AVAILABLE ? std::nullopt : std::optional<std::uint64_t>(bytes),
                           std::nullopt, std::nullopt});
        }
        break;
    }
    if (a.process_utilization && !out.empty()) {
        // lastSeenTimeStamp 0 returns every sample the driver holds, several per process and in no
        // documented order: the buffer is sized by the documented query (a null buffer: NVML
        // answers INSUFFICIENT_SIZE with the count), grows if more samples arrive before the read,
        // and each process takes its newest sample.
        unsigned count = 0;
        abi::nvmlReturn_t s = a.process_utilization(h, nullptr, &count, 0);
        if (s != abi::NVML_ERROR_INSUFFICIENT_SIZE) count = 0;  // no count given: start from the processes'
        std::vector<abi::nvmlProcessUtilizationSample_t> samples(std::max<std::size_t>(count, out.size()) + 8);
        if (s != abi::NVML_ERROR_NOT_FOUND) s = abi::NVML_ERROR_INSUFFICIENT_SIZE;  // NOT_FOUND: no samples at all
        for (int attempt = 0; attempt < 4 && s == abi::NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
            count = unsigned(samples.size());
            s = a.process_utilization(h, samples.data(), &count, 0);
            if (s == abi::NVML_ERROR_INSUFFICIENT_SIZE) samples.resize(count + 8);
        }
        if (s == abi::NVML_SUCCESS)
            for (ProcessReading& p : out) {
                const abi::nvmlProcessUtilizationSample_t* newest = nullptr;
                for (unsigned i = 0; i < count; ++i)
                    if (samples[i].pid == p.pid && (!newest || samples[i].timeStamp > newest->timeStamp)) newest = &samples[i];
                if (newest) p.sm_utilization_pct = newest->smUtil, p.memory_utilization_pct = newest->memUtil;
            }
    }
    return out;
}
}  // namespace detail

// The compute processes on device d, or on NVML's GPU i (empty when NVML is unavailable or refuses).
inline std::vector<ProcessReading> processes(Device d) { return detail::processes_of(detail::handle(d)); }
inline std::vector<ProcessReading> processes(Index i) { return detail::processes_of(detail::handle_at(i.value)); }

// The reasons device d's clocks are below their maximum now; nullopt when NVML cannot tell.
inline std::optional<std::uint64_t> clock_reasons(Device d) {
    const abi::nvmlDevice_t h = detail::handle(d);
    if (!h) return std::nullopt;
    if (auto bits = detail::query<unsigned long long>(nullptr, "", api().clocks_event_reasons, h)) return std::uint64_t(*bits);
    return std::nullopt;
}

// XID critical-error events of some devices (NVML's event set): poll() returns the events that
// arrived within its timeout. Where NVML cannot deliver them (no driver, or a device without
// support), supported() is false and poll() returns nothing.
class XidWatch {
public:
    explicit XidWatch(const std::vector<Device>& devices) {
        const abi::Api& a = api();
        if (!available() || !a.event_set_create || !a.register_events || !a.event_set_wait) return;
        if (a.event_set_create(&set_) != abi::NVML_SUCCESS) return;
        for (Device d : devices) {
            const abi::nvmlDevice_t h = detail::handle(d);
            if (h && a.register_events(h, abi::nvmlEventTypeXidCriticalError, set_) == abi::NVML_SUCCESS) {
                registered_.push_back({h, d.index});
            }
        }
    }
    ~XidWatch() {
        if (set_ && api().event_set_free) (void)api().event_set_free(set_);
    }
    XidWatch(const XidWatch&) = delete;
    XidWatch& operator=(const XidWatch&) = delete;

    bool supported() const { return !registered_.empty(); }

    struct Event {
        int device;
        std::uint64_t xid;
    };
    // The events that arrive within `timeout` (at most 64 per call).
    std::vector<Event> poll(std::chrono::milliseconds timeout) {
        std::vector<Event> out;
        if (!supported()) return out;
        abi::nvmlEventData_t data{};
        unsigned wait_ms = unsigned(std::max<std::int64_t>(0, timeout.count()));
        while (out.size() < 64 && api().event_set_wait(set_, &data, wait_ms) == abi::NVML_SUCCESS) {
            for (const auto& [h, index] : registered_)
                if (h == data.device) out.push_back({index, data.eventData});
            wait_ms = 0;  // then only what is already queued
        }
        return out;
    }

private:
    abi::nvmlEventSet_t set_ = nullptr;
    std::vector<std::pair<abi::nvmlDevice_t, int>> registered_;
};

}  // namespace tessel::nvml
