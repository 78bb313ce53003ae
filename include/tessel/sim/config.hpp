// Settings of the simulated device and execution, read once from the environment.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace tessel::sim {

// What the sim reads from the environment (see docs/sim.md for the variables).
struct Config {
    std::size_t memory_bytes = std::size_t(16) << 30;  // TESSEL_SIM_MEMORY: capacity per simulated device
    int devices = 1;                                    // TESSEL_SIM_DEVICES
    int workers = 0;                                    // TESSEL_SIM_WORKERS: block worker threads (0 = cores)
    std::optional<std::uint64_t> shuffle_seed;          // TESSEL_SIM_SHUFFLE: permute thread order
    std::size_t fiber_stack_bytes = 256 * 1024;         // TESSEL_SIM_STACK_KB

    static Config from_env();
};

// Parses "16GiB", "512MiB", "1G", "4096" (bytes) into a byte count; throws on anything else.
inline std::size_t parse_bytes(const std::string& text, const char* variable) {
    std::size_t pos = 0;
    unsigned long long value = 0;
    try {
        value = std::stoull(text, &pos);
    } catch (...) {
        throw std::invalid_argument(std::string(variable) + "='" + text + "' is not a size (e.g. 16GiB, 512MiB, 1048576)");
    }
    std::string unit = text.substr(pos);
    for (auto& c : unit) c = char(std::tolower(static_cast<unsigned char>(c)));
    std::size_t scale = 1;
    if (unit.empty() || unit == "b") scale = 1;
    else if (unit == "k" || unit == "kib" || unit == "kb") scale = std::size_t(1) << 10;
    else if (unit == "m" || unit == "mib" || unit == "mb") scale = std::size_t(1) << 20;
    else if (unit == "g" || unit == "gib" || unit == "gb") scale = std::size_t(1) << 30;
    else throw std::invalid_argument(std::string(variable) + "='" + text + "': unknown unit '" + unit + "' (use KiB, MiB or GiB)");
    return std::size_t(value) * scale;
}

inline Config Config::from_env() {
    Config c;
    if (const char* v = std::getenv("TESSEL_SIM_MEMORY"); v && *v) c.memory_bytes = parse_bytes(v, "TESSEL_SIM_MEMORY");
    if (const char* v = std::getenv("TESSEL_SIM_DEVICES"); v && *v) {
        c.devices = std::atoi(v);
        if (c.devices < 1 || c.devices > 64)
            throw std::invalid_argument(std::string("TESSEL_SIM_DEVICES='") + v + "' must be between 1 and 64");
    }
    if (const char* v = std::getenv("TESSEL_SIM_WORKERS"); v && *v) c.workers = std::atoi(v);
    if (c.workers <= 0) c.workers = int(std::max(1u, std::thread::hardware_concurrency()));
    if (const char* v = std::getenv("TESSEL_SIM_SHUFFLE"); v && *v) c.shuffle_seed = std::stoull(v);
    if (const char* v = std::getenv("TESSEL_SIM_STACK_KB"); v && *v) c.fiber_stack_bytes = std::size_t(std::atoi(v)) * 1024;
    if (c.fiber_stack_bytes < 64 * 1024) c.fiber_stack_bytes = 64 * 1024;
    return c;
}

// The process-wide configuration, read on first use. Tests may override it before the first launch.
inline Config& config() {
    static Config c = Config::from_env();
    return c;
}

}  // namespace tessel::sim
