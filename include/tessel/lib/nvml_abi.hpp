// The part of NVML's C interface tessel calls, as nvml.h declares it (NVML API version 12; the CUDA
// toolkit here ships no nvml.h, and NVML is loaded at run time, so tessel states the ABI itself):
// the return codes, the handle types, the structs and constants of the entry points in Api, and Api,
// the table of those entry points (lib/nvml.hpp fills it from libnvidia-ml.so.1 on CUDA, from the
// sim's stand-in, sim/nvml.hpp, on the sim). In namespace tessel::nvml::abi, so a program that also
// includes nvml.h sees no clash.
#pragma once

#include <cstdint>

namespace tessel::nvml::abi {

using nvmlReturn_t = int;  // an enum in nvml.h, of int's size
inline constexpr nvmlReturn_t NVML_SUCCESS = 0;
inline constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
inline constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
inline constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
inline constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
inline constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
inline constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
inline constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
inline constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
inline constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
inline constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlEventSet_st;
using nvmlEventSet_t = nvmlEventSet_st*;

// nvmlDeviceGetMemoryInfo's: used counts the driver's reserved memory too.
struct nvmlMemory_t {
    unsigned long long total, free, used;  // bytes
};
// nvmlDeviceGetMemoryInfo_v2's (driver 510 on), as nvidia-smi reports it: reserved apart, used without it.
struct nvmlMemory_v2_t {
    unsigned int version;  // nvmlMemory_v2
    unsigned long long total, reserved, free, used;  // bytes
};
// NVML_STRUCT_VERSION(Memory, 2): the struct's size and its version in the top byte.
inline constexpr unsigned nvmlMemory_v2 = unsigned(sizeof(nvmlMemory_v2_t)) | (2u << 24);
// A 64-bit reading NVML does not have (a process's memory under WDDM).
inline constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ull;
struct nvmlUtilization_t {
    unsigned int gpu, memory;  // percent of the last sample period
};
// nvmlProcessInfo_v2_t, which nvmlDeviceGetComputeRunningProcesses_v3 fills.
struct nvmlProcessInfo_t {
    unsigned int pid;
    unsigned long long usedGpuMemory;  // bytes
    unsigned int gpuInstanceId, computeInstanceId;
};
struct nvmlProcessUtilizationSample_t {
    unsigned int pid;
    unsigned long long timeStamp;  // microseconds
    unsigned int smUtil, memUtil, encUtil, decUtil;
};
struct nvmlEventData_t {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;  // the XID for nvmlEventTypeXidCriticalError
    unsigned int gpuInstanceId, computeInstanceId;
};

// nvmlDeviceGetPciInfo_v3's.
struct nvmlPciInfo_t {
    char busIdLegacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: "00000000:01:00.0", as nvidia-smi's pci.bus_id
};
static_assert(sizeof(nvmlPciInfo_t) == 68, "nvml.h's nvmlPciInfo_t");
inline constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;

inline constexpr unsigned NVML_TEMPERATURE_GPU = 0;
inline constexpr unsigned NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2;
inline constexpr unsigned NVML_MEMORY_ERROR_TYPE_CORRECTED = 0, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
inline constexpr unsigned NVML_VOLATILE_ECC = 0;
inline constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8;

// The entry points, resolved once; any may be null (an older driver), and then that reading is absent.
struct Api {
    nvmlReturn_t (*init)() = nullptr;  // nvmlInit_v2
    const char* (*error_string)(nvmlReturn_t) = nullptr;
    nvmlReturn_t (*device_count)(unsigned*) = nullptr;                          // nvmlDeviceGetCount_v2
    nvmlReturn_t (*handle_by_index)(unsigned, nvmlDevice_t*) = nullptr;         // nvmlDeviceGetHandleByIndex_v2
    nvmlReturn_t (*handle_by_pci_bus_id)(const char*, nvmlDevice_t*) = nullptr;  // nvmlDeviceGetHandleByPciBusId_v2
    nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
    nvmlReturn_t (*temperature)(nvmlDevice_t, unsigned, unsigned*) = nullptr;
    nvmlReturn_t (*power_usage)(nvmlDevice_t, unsigned*) = nullptr;            // milliwatts
    nvmlReturn_t (*enforced_power_limit)(nvmlDevice_t, unsigned*) = nullptr;   // milliwatts
    nvmlReturn_t (*utilization_rates)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
    nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
    nvmlReturn_t (*compute_running_processes)(nvmlDevice_t, unsigned*, nvmlProcessInfo_t*) = nullptr;  // _v3
    nvmlReturn_t (*process_utilization)(nvmlDevice_t, nvmlProcessUtilizationSample_t*, unsigned*, unsigned long long) = nullptr;
    nvmlReturn_t (*clock_info)(nvmlDevice_t, unsigned, unsigned*) = nullptr;      // MHz
    nvmlReturn_t (*max_clock_info)(nvmlDevice_t, unsigned, unsigned*) = nullptr;  // MHz
    nvmlReturn_t (*clocks_event_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
    nvmlReturn_t (*total_ecc_errors)(nvmlDevice_t, unsigned, unsigned, unsigned long long*) = nullptr;
    nvmlReturn_t (*pcie_link_generation)(nvmlDevice_t, unsigned*) = nullptr;  // nvmlDeviceGetCurrPcieLinkGeneration
    nvmlReturn_t (*pcie_link_width)(nvmlDevice_t, unsigned*) = nullptr;       // nvmlDeviceGetCurrPcieLinkWidth
    nvmlReturn_t (*event_set_create)(nvmlEventSet_t*) = nullptr;
    nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
    nvmlReturn_t (*event_set_wait)(nvmlEventSet_t, nvmlEventData_t*, unsigned) = nullptr;  // nvmlEventSetWait_v2, timeout in ms
    nvmlReturn_t (*event_set_free)(nvmlEventSet_t) = nullptr;
    nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;  // nvmlSystemGetDriverVersion
    nvmlReturn_t (*memory_info_v2)(nvmlDevice_t, nvmlMemory_v2_t*) = nullptr;  // nvmlDeviceGetMemoryInfo_v2
    nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;          // nvmlDeviceGetPciInfo_v3
    nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;             // nvmlDeviceGetUUID
};

}  // namespace tessel::nvml::abi
