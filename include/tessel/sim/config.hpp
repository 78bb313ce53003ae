// Settings of the simulated device and execution, read once from the environment.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <thread>

#include "../core/env.hpp"

namespace tessel::sim {

// What the sim reads from the environment (see docs/sim.md for the variables).
struct Config {
    std::size_t memory_bytes = std::size_t(16) << 30;  // TESSEL_SIM_MEMORY: capacity per simulated device
    int devices = 1;                                    // TESSEL_SIM_DEVICES
    int workers = 0;                                    // TESSEL_SIM_WORKERS: block worker threads (0 = cores)
    std::optional<std::uint64_t> shuffle_seed;          // TESSEL_SIM_SHUFFLE: permute thread order
    std::size_t fiber_stack_bytes = 256 * 1024;         // TESSEL_SIM_STACK_KB
    bool peer_access = true;                            // TESSEL_SIM_PEER: devices may access each other (0: as PCIe without P2P)
    int nvml_lost_device = -1;                          // TESSEL_SIM_NVML_LOST: a device NVML calls lost (-1: none)
    bool cuda_unavailable = false;                      // TESSEL_SIM_CUDA_UNAVAILABLE: CUDA finds no device, NVML still does

    static Config from_env();
};

// The limits of each variable (docs/sim.md).
inline constexpr std::uint64_t max_memory_bytes = std::uint64_t(1) << 50;  // 1 PiB: capacity arithmetic never wraps
inline constexpr int max_devices = 64, max_workers = 1024;
inline constexpr std::uint64_t min_stack_kb = 64, max_stack_kb = 1 << 20;

// Reads the TESSEL_SIM_* variables strictly (tessel::env): a malformed or out-of-range value is an
// InvalidArgument naming the variable and its range.
inline Config Config::from_env() {
    Config c;
    auto get = [](const char* name) -> const char* {
        const char* v = std::getenv(name);
        return v && *v ? v : nullptr;
    };
    if (const char* v = get("TESSEL_SIM_MEMORY")) c.memory_bytes = std::size_t(env::parse_bytes("TESSEL_SIM_MEMORY", v, 1, max_memory_bytes));
    if (const char* v = get("TESSEL_SIM_DEVICES")) c.devices = int(env::parse_integer("TESSEL_SIM_DEVICES", v, 1, max_devices));
    if (const char* v = get("TESSEL_SIM_WORKERS")) c.workers = int(env::parse_integer("TESSEL_SIM_WORKERS", v, 0, max_workers));
    if (c.workers <= 0) c.workers = int(std::max(1u, std::thread::hardware_concurrency()));
    if (const char* v = get("TESSEL_SIM_SHUFFLE"))
        c.shuffle_seed = env::parse_integer("TESSEL_SIM_SHUFFLE", v, 0, std::numeric_limits<std::uint64_t>::max());
    if (const char* v = get("TESSEL_SIM_PEER")) c.peer_access = env::parse_integer("TESSEL_SIM_PEER", v, 0, 1) == 1;
    if (const char* v = get("TESSEL_SIM_NVML_LOST")) {
        c.nvml_lost_device = int(env::parse_integer("TESSEL_SIM_NVML_LOST", v, 0, max_devices - 1));
        if (c.nvml_lost_device >= c.devices)
            fail<InvalidArgument>("TESSEL_SIM_NVML_LOST=", c.nvml_lost_device, " names no device: the sim has ", c.devices,
                                  " (TESSEL_SIM_DEVICES), indices 0 to ", c.devices - 1);
    }
    if (const char* v = get("TESSEL_SIM_CUDA_UNAVAILABLE"))
        c.cuda_unavailable = env::parse_integer("TESSEL_SIM_CUDA_UNAVAILABLE", v, 0, 1) == 1;
    if (const char* v = get("TESSEL_SIM_STACK_KB"))
        c.fiber_stack_bytes = std::size_t(env::parse_integer("TESSEL_SIM_STACK_KB", v, min_stack_kb, max_stack_kb)) * 1024;
    return c;
}

// The process-wide configuration, read on first use. Tests may override it before the first launch.
inline Config& config() {
    static Config c = Config::from_env();
    return c;
}

}  // namespace tessel::sim
